/* `layercake bench <name>`: dispatch to the benchmarks in bench/. */
#include <stdio.h>
#include <string.h>

#include "bench.h"
#include "cli.h"

static const char bench_help[] =
	"NAME\n"
	"    layercake bench - benchmarks, compared as ratios against baselines\n\n"
	"SYNOPSIS\n"
	"    layercake bench transport [--transport tcp|shm|loop] [--region-mib M]\n"
	"                              [--block-kib K] [--batch B] [--total-mib T] [--json]\n"
	"    layercake bench planner [--json]\n"
	"    layercake bench wake [--json]\n"
	"    layercake bench control [--json]\n\n"
	"DESCRIPTION\n"
	"    Each benchmark prints a readable summary, or with --json exactly one JSON\n"
	"    object on stdout (logs go to stderr). `layercake bench <name> --help`\n"
	"    describes one benchmark.\n";

typedef int (*bench_fn)(int, char **);

int lc__cmd_bench(int argc, char **argv)
{
	static const char *const table[] = {"transport", "planner", "wake", "control"};
	bench_fn fns[] = {lc__bench_transport, lc__bench_planner, lc__bench_wake,
			  lc__bench_control};
	if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		fputs(bench_help, argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
		if (strcmp(argv[1], table[i]))
			continue;
		if (!fns[i]) {
			fprintf(stderr, "layercake bench: '%s' is not built into this binary\n",
				argv[1]);
			return 2;
		}
		return fns[i](argc - 1, argv + 1);
	}
	fprintf(stderr, "layercake bench: unknown benchmark '%s'\n", argv[1]);
	return 2;
}
