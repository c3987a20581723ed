/* The `layercake` command: info, bench, demo (and later bootstrap). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "cli.h"
#include "layercake.h"

static const lc_cli_command_t commands[] = {
	{"info", "version, transports built in, configuration", lc__cmd_info},
	{"demo", "P and D stream a model's KV, layer-wise vs whole-request: TTFT, tail, timeline",
	 lc__cmd_demo},
	{"bench", "benchmarks: transport, planner, wake, control, checksum, strided, landed, peers",
	 lc__cmd_bench},
	{"bootstrap", "run the bootstrap HTTP server (P ranks register, D ranks discover)",
	 lc__cmd_bootstrap},
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: layercake <command> [options]\n\n"
		"layercake %s streams an LLM request's KV cache from a prefill instance\n"
		"to a decode instance, layer by layer.\n\ncommands:\n",
		lc_version());
	for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
		fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
	fprintf(f, "\n`layercake <command> --help` describes a command.\n"
		   "Environment: LAYERCAKE_LOG=error|warn|info|debug|trace, and every knob of\n"
		   "`layercake info --config`.\n");
}

int main(int argc, char **argv)
{
	if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
	    !strcmp(argv[1], "help")) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	if (!strcmp(argv[1], "--version")) {
		printf("layercake %s\n", lc_version());
		return 0;
	}
	for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
		if (!strcmp(argv[1], commands[i].name))
			return commands[i].run(argc - 1, argv + 1);
	fprintf(stderr, "layercake: unknown command '%s'\n\n", argv[1]);
	usage(stderr);
	return 2;
}
