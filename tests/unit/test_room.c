/* Rooms: the status machine (monotonic, sticky Failed, final Success,
 * reasons, metrics), fan-in of destinations, removal and fresh reuse. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/room.h"

static lc__room_table_t t;

static int setup(void **state)
{
	return lc__room_table_init(&t);
}

static int teardown(void **state)
{
	lc__room_table_fini(&t);
	return 0;
}

static lc__room_t *open_room(uint64_t id)
{
	lc__room_t *r = NULL;
	assert_int_equal(lc__room_open(&t, id, 1000, &r), 0);
	return r;
}

static void status_values_match_the_seed(void **state)
{
	assert_int_equal(LC_ROOM_FAILED, 0);
	assert_int_equal(LC_ROOM_BOOTSTRAPPING, 1);
	assert_int_equal(LC_ROOM_BOOTSTRAPPED, 2);
	assert_int_equal(LC_ROOM_WAITING_FOR_INPUT, 3);
	assert_int_equal(LC_ROOM_TRANSFERRING, 4);
	assert_int_equal(LC_ROOM_SUCCESS, 5);
	assert_string_equal(lc_room_status_name(4), "Transferring");
	assert_string_equal(lc_fail_reason_name(LC_FAIL_LAYER_TIMEOUT), "layer_timeout");
	/* out-of-memory has its own reason, added last: no value moved */
	assert_int_equal(LC_FAIL_STOPPED, 11);
	assert_int_equal(LC_FAIL_NO_MEMORY, 12);
	assert_int_equal(lc_fail_reason_count(), LC_FAIL_REASON_COUNT);
	assert_int_equal(LC_FAIL_REASON_COUNT, LC_FAIL_NO_MEMORY + 1);
	assert_string_equal(lc_fail_reason_name(LC_FAIL_NO_MEMORY), "no_memory");
	assert_string_equal(lc_fail_reason_symbol(LC_FAIL_NO_MEMORY), "LC_FAIL_NO_MEMORY");
	assert_string_equal(lc_fail_reason_symbol(LC_FAIL_REASON_COUNT), "LC_FAIL_UNKNOWN");
	assert_string_equal(lc_fail_reason_name(LC_FAIL_REASON_COUNT), "unknown");
}

static void updates_are_monotonic(void **state)
{
	lc__room_t *r = open_room(1);
	assert_int_equal(lc__room_set_state(&t, r, LC_ROOM_TRANSFERRING, 0, NULL, 2000), 1);
	/* A late Bootstrapped is absorbed, not applied. */
	assert_int_equal(lc__room_set_state(&t, r, LC_ROOM_BOOTSTRAPPED, 0, NULL, 3000), 0);
	assert_int_equal(r->status, LC_ROOM_TRANSFERRING);
	assert_int_equal(lc__room_set_state(&t, r, LC_ROOM_SUCCESS, 0, NULL, 4000), 1);
	assert_int_equal(t.metrics.succeeded, 1);
	assert_int_equal(t.metrics.latency.count, 1);
}

static void failed_is_sticky_and_keeps_its_first_reason(void **state)
{
	lc__room_t *r = open_room(2);
	assert_int_equal(lc__room_set_state(&t, r, LC_ROOM_FAILED, LC_FAIL_LAYER_TIMEOUT,
					    "layer 7 not ready", 2000),
			 1);
	assert_int_equal(lc__room_set_state(&t, r, LC_ROOM_SUCCESS, 0, NULL, 3000), LC_ERR_STATE);
	assert_int_equal(lc__room_set_state(&t, r, LC_ROOM_BOOTSTRAPPED, 0, NULL, 3000),
			 LC_ERR_STATE);
	assert_int_equal(lc__room_set_state(&t, r, LC_ROOM_FAILED, LC_FAIL_TRANSFER, "other", 3000),
			 0);
	assert_int_equal(r->status, LC_ROOM_FAILED);
	assert_int_equal(r->fail_reason, LC_FAIL_LAYER_TIMEOUT);
	assert_string_equal(r->reason, "layer 7 not ready");
	assert_int_equal(t.metrics.failed, 1);
	assert_int_equal(t.metrics.failed_by_reason[LC_FAIL_LAYER_TIMEOUT], 1);
	assert_int_equal(t.metrics.failed_by_reason[LC_FAIL_TRANSFER], 0);
}

static void success_is_final(void **state)
{
	lc__room_t *r = open_room(3);
	assert_int_equal(lc__room_set_state(&t, r, LC_ROOM_SUCCESS, 0, NULL, 2000), 1);
	assert_int_equal(lc__room_set_state(&t, r, LC_ROOM_FAILED, LC_FAIL_CANCELLED, "late", 3000),
			 LC_ERR_STATE);
	assert_int_equal(r->status, LC_ROOM_SUCCESS);
	assert_int_equal(t.metrics.failed, 0);
}

static void transition_table_allows_only_growth_or_failure(void **state)
{
	for (int from = 0; from <= 5; from++)
		for (int to = 0; to <= 5; to++) {
			bool want = from != LC_ROOM_FAILED && from != LC_ROOM_SUCCESS &&
				    (to == LC_ROOM_FAILED || to > from);
			assert_int_equal(lc__room_transition_legal(from, to), want);
		}
	assert_false(lc__room_transition_legal(1, 6));
}

static void fan_in_needs_every_required_destination(void **state)
{
	lc__room_t *r = open_room(4);
	lc_dst_params_t d = {.size = sizeof(d), .session = "a", .required_dst_count = 3};
	assert_int_equal(lc__room_add_dst(r, &d, NULL), 0);
	assert_false(lc__room_fanin_done(r));
	assert_int_equal(lc__room_add_dst(r, &d, NULL), -EEXIST);
	d.session = "b";
	assert_int_equal(lc__room_add_dst(r, &d, NULL), 0);
	d.session = "c";
	d.required_dst_count = 2; /* disagrees with the first */
	assert_int_equal(lc__room_add_dst(r, &d, NULL), -EINVAL);
	d.required_dst_count = 3;
	d.is_dummy = 1;
	assert_int_equal(lc__room_add_dst(r, &d, NULL), 0);
	assert_true(lc__room_fanin_done(r));
	assert_true(r->dst[2].dummy);
	d.session = "d";
	assert_int_equal(lc__room_add_dst(r, &d, NULL), LC_ERR_STATE);
}

static void destination_arrays_are_copied(void **state)
{
	lc__room_t *r = open_room(5);
	int64_t pages[] = {4, 5, 6};
	lc_dst_params_t d = {.size = sizeof(d),
			     .session = "a",
			     .required_dst_count = 1,
			     .pages = pages,
			     .page_count = 3};
	assert_int_equal(lc__room_add_dst(r, &d, NULL), 0);
	pages[0] = 99;
	assert_int_equal(r->dst[0].pages[0], 4);
	assert_int_equal(r->dst[0].page_count, 3);
}

static void removed_room_id_starts_fresh(void **state)
{
	lc__room_t *r = open_room(6);
	assert_int_equal(lc__room_open(&t, 6, 0, &r), -EEXIST);
	lc__room_set_state(&t, r, LC_ROOM_FAILED, LC_FAIL_TRANSFER, "x", 2000);
	lc__room_remove(&t, r);
	assert_null(lc__room_find(&t, 6));
	r = open_room(6);
	assert_int_equal(r->status, LC_ROOM_BOOTSTRAPPING);
	assert_int_equal(r->reason[0], '\0');
}

static void table_holds_many_rooms_and_shrinks_back(void **state)
{
	for (uint64_t i = 0; i < 5000; i++)
		open_room(1000 + i * 7919);
	assert_int_equal(t.count, 5000);
	for (uint64_t i = 0; i < 5000; i++) {
		lc__room_t *r = lc__room_find(&t, 1000 + i * 7919);
		assert_non_null(r);
		lc__room_remove(&t, r);
	}
	assert_int_equal(t.count, 0);
}

/* D's receivers keep their status outside lc__room_t; they change it
 * through the same function and table, with their own counters. */
static void any_holder_goes_through_the_same_table(void **state)
{
	lc__room_metrics_t m = {0};
	int status = LC_ROOM_BOOTSTRAPPING, fail_reason = 0;
	char reason[LC_REASON_MAX] = "";
	uint64_t bootstrapped = 0, final = 0;
	lc__room_view_t v = {.id = 9,
			     .side = "receiver room",
			     .status = &status,
			     .fail_reason = &fail_reason,
			     .reason = reason,
			     .reason_cap = sizeof reason,
			     .opened_ns = 100,
			     .bootstrapped_ns = &bootstrapped,
			     .final_ns = &final};
	assert_int_equal(lc__room_state_apply(&m, &v, LC_ROOM_BOOTSTRAPPED, 0, NULL, 200), 1);
	assert_int_equal(bootstrapped, 200);
	assert_int_equal(lc__room_state_apply(&m, &v, LC_ROOM_BOOTSTRAPPING, 0, NULL, 250), 0);
	assert_int_equal(status, LC_ROOM_BOOTSTRAPPED);
	assert_int_equal(lc__room_state_apply(&m, &v, LC_ROOM_TRANSFERRING, 0, NULL, 300), 1);
	assert_int_equal(lc__room_state_apply(&m, &v, LC_ROOM_FAILED, LC_FAIL_CANCELLED,
					      "cancelled by D", 400),
			 1);
	assert_int_equal(status, LC_ROOM_FAILED);
	assert_int_equal(fail_reason, LC_FAIL_CANCELLED);
	assert_string_equal(reason, "cancelled by D");
	assert_int_equal(final, 400);
	assert_int_equal(m.failed, 1);
	assert_int_equal(m.failed_by_reason[LC_FAIL_CANCELLED], 1);
	assert_int_equal(m.latency.count, 1);
	assert_int_equal(lc__room_state_apply(&m, &v, LC_ROOM_SUCCESS, 0, NULL, 500), LC_ERR_STATE);
	assert_int_equal(status, LC_ROOM_FAILED);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(status_values_match_the_seed, setup, teardown),
		cmocka_unit_test_setup_teardown(updates_are_monotonic, setup, teardown),
		cmocka_unit_test_setup_teardown(failed_is_sticky_and_keeps_its_first_reason, setup,
						teardown),
		cmocka_unit_test_setup_teardown(success_is_final, setup, teardown),
		cmocka_unit_test_setup_teardown(transition_table_allows_only_growth_or_failure,
						setup, teardown),
		cmocka_unit_test_setup_teardown(fan_in_needs_every_required_destination, setup,
						teardown),
		cmocka_unit_test_setup_teardown(destination_arrays_are_copied, setup, teardown),
		cmocka_unit_test_setup_teardown(removed_room_id_starts_fresh, setup, teardown),
		cmocka_unit_test(any_holder_goes_through_the_same_table),
		cmocka_unit_test_setup_teardown(table_holds_many_rooms_and_shrinks_back, setup,
						teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
