/* `layercake bootstrap`: the bootstrap HTTP server on its own. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "layercake.h"

int lc__cmd_bootstrap(int argc, char **argv);

static volatile sig_atomic_t stop_requested;

static void on_signal(int sig)
{
	(void)sig;
	stop_requested = 1;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: layercake bootstrap [--host ADDR] [--port N] [--secret TEXT]\n\n"
		"Run the bootstrap HTTP server that P ranks register with (PUT /route) and\n"
		"D ranks discover P through (GET /route); also GET /health and GET /metrics.\n"
		"  --host ADDR    bind address (default 0.0.0.0)\n"
		"  --port N       port (default: knob bootstrap_port, 8998; 0 picks one)\n"
		"  --secret TEXT  PUT /route needs \"Authorization: Bearer TEXT\"\n"
		"                 (default: $LAYERCAKE_SECRET_DIR/bootstrap.secret if present)\n"
		"With LAYERCAKE_SHARED_SECRET (or LAYERCAKE_SHARED_SECRET_FILE) set, PUT /route\n"
		"also takes the bearer every P of the deployment derives from it, and such a PUT\n"
		"replaces at once the route of a P that no longer answers (docs/security.md).\n"
		"Prints \"listening HOST:PORT\" on stdout once it serves; stops on SIGINT/SIGTERM.\n");
}

int lc__cmd_bootstrap(int argc, char **argv)
{
	lc_bootstrap_params_t p = {.size = sizeof p, .port = -1};
	if (lc__cli_wants_help(argc, argv)) {
		usage(stdout);
		return 0;
	}
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (i + 1 >= argc) {
			fprintf(stderr, "bootstrap: %s needs a value\n", a);
			usage(stderr);
			return 2;
		}
		if (!strcmp(a, "--host")) {
			p.host = argv[++i];
		} else if (!strcmp(a, "--port")) {
			char *end;
			long v = strtol(argv[++i], &end, 10);
			if (*end || v < 0 || v > 65535) {
				fprintf(stderr, "bootstrap: bad port '%s'\n", argv[i]);
				return 2;
			}
			p.port = (int)v;
		} else if (!strcmp(a, "--secret")) {
			p.secret = argv[++i];
		} else {
			fprintf(stderr, "bootstrap: unknown option '%s'\n", a);
			usage(stderr);
			return 2;
		}
	}
	lc_ctx_t *ctx = NULL;
	int rc = lc_ctx_create(
		&(lc_ctx_params_t){.size = sizeof(lc_ctx_params_t), .name = "bootstrap"}, &ctx);
	if (rc < 0) {
		fprintf(stderr, "bootstrap: %s\n", lc__cli_why(rc));
		return 1;
	}
	p.ctx = ctx;
	lc_bootstrap_t *b = NULL;
	rc = lc_bootstrap_start(&p, &b);
	if (rc < 0) {
		fprintf(stderr, "bootstrap: cannot start: %s\n", lc__cli_why(rc));
		lc_ctx_destroy(ctx);
		return 1;
	}
	char addr[300];
	lc_bootstrap_addr(b, addr, sizeof addr);
	printf("listening %s\n", addr);
	fflush(stdout);
	struct sigaction sa = {.sa_handler = on_signal};
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	while (!stop_requested)
		pause();
	lc_bootstrap_stop(b);
	lc_ctx_destroy(ctx);
	return 0;
}
