/* Shared by alloc_fail.c (the injector and the runner) and
 * alloc_scenarios.c (what each run does through the public API). */
#ifndef LC_ALLOC_FAIL_H
#define LC_ALLOC_FAIL_H

#include <stdint.h>

#include "layercake.h"
#include "layercake/testing.h" /* lc_sim_*, loop faults */

/* A scenario's outcome, as its child's exit code. */
enum af_outcome {
	AF_SUCCESS = 0, /* every call succeeded, the work was done */
	AF_ERROR = 1,   /* a call returned an error and everything was undone */
	AF_BROKEN = 2,  /* a promise broken: wrong bytes, a lost completion, a room stuck */
	AF_SKIP = 77,   /* the facility is not here (clean run only) */
};

typedef struct af_scenario {
	const char *name;
	/* Returns an af_outcome. Runs in a fresh child; must undo all it made. */
	int (*run)(void);
	int deadline_s; /* the child's alarm() */
} af_scenario_t;

extern const af_scenario_t af_scenarios[];

/* Where the scenario is (the public call in progress), for the report. */
void af_stage(const char *what);
/* A public call failed with rc: record it (and check lc_last_error). */
int af_failed(const char *call, int rc);
/* A promise broken: record why, return AF_BROKEN. */
int af_broken(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
uint64_t af_now_ms(void);

#endif
