/*
 * README.md's P snippet as an application (issue 20, point 7): check-install.sh
 * copies this file to app.c, the snippet (README.md between its
 * "readme-snippet: prefill" markers, as it is) to readme_prefill.c and
 * examples/prefill_decode.c beside them, then builds app.c with the README's
 * pkg-config line against an installed prefix and runs it. P is the snippet's
 * prefill_serve(); the bootstrap server, the model and D are the example's.
 */
#define main prefill_decode_main
#include "prefill_decode.c"
#undef main

#include "readme_prefill.c"

/* P's process: the example's model and bootstrap server, the README's P. */
static int readme_prefill(int addr_fd, int done_fd)
{
	model_t m;
	lc_bootstrap_t *bs;
	char addr[64] = "";
	int64_t pages[PROMPT_PAGES];
	const char first_token[] = "token=1234";
	model_init(&m, "prefill", 1);
	lc_bootstrap_params_t bp = {.size = sizeof bp, .host = "127.0.0.1", .port = 0};
	CHECK(lc_bootstrap_start(&bp, &bs));
	CHECK(lc_bootstrap_addr(bs, addr, sizeof addr));
	if (write(addr_fd, addr, sizeof addr) != (ssize_t)sizeof addr)
		return 1;
	for (int i = 0; i < PROMPT_PAGES; i++)
		pages[i] = i;
	int rc = prefill_serve(m.ctx, m.layout, addr, ROOM, pages, PROMPT_PAGES, LAYERS,
			       first_token, sizeof first_token);
	printf("P (README snippet): prefill_serve returned %d%s%s\n", rc, rc < -1 ? ": " : "",
	       rc < -1 ? lc_strerror(rc) : "");
	fflush(stdout);
	char x;
	if (read(done_fd, &x, 1) < 0) /* until D is done */
		rc = -1;
	lc_bootstrap_stop(bs);
	model_fini(&m);
	return rc == 0 ? 0 : 1;
}

int main(void)
{
	int a[2], done[2];
	char addr[64];
	if (pipe(a) || pipe(done))
		return 1;
	pid_t p = fork();
	if (p == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		close(a[0]);
		close(done[1]);
		_exit(readme_prefill(a[1], done[0]));
	}
	close(a[1]);
	close(done[0]);
	if (read(a[0], addr, sizeof addr) != (ssize_t)sizeof addr) {
		fprintf(stderr, "P did not start\n");
		return 1;
	}
	int d_rc = decode(addr, "tcp://127.0.0.1:0");
	close(done[1]);
	int st = 0;
	waitpid(p, &st, 0);
	int p_rc = WIFEXITED(st) ? WEXITSTATUS(st) : 1;
	printf("%s\n", !d_rc && !p_rc ? "OK" : "FAILED");
	return d_rc || p_rc;
}
