/* `layercake info`: version, transports, configuration with current values. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "layercake.h"

bool lc__cli_wants_help(int argc, char **argv)
{
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))
			return true;
	return false;
}

static const char info_help[] =
	"NAME\n"
	"    layercake info - version, transports, CUDA and configuration\n\n"
	"SYNOPSIS\n"
	"    layercake info [--config] [--json]\n\n"
	"DESCRIPTION\n"
	"    Prints the library version, the transports built in, whether CUDA was\n"
	"    found at run time (libcuda through dlopen, knob cuda_lib; if not, why not)\n"
	"    with its devices, and the configuration\n"
	"    table: every knob with its LAYERCAKE_* environment variable, default,\n"
	"    current value (after the environment) and help line.\n\n"
	"OPTIONS\n"
	"    --config   only the configuration table\n"
	"    --json     one JSON object on stdout\n";

/* A knob's value in JSON: numbers as they are, text as an escaped string. */
static void json_value(const char *v, int is_text)
{
	if (!is_text) {
		printf("%s", v);
		return;
	}
	putchar('"');
	for (const unsigned char *p = (const unsigned char *)v; *p; p++) {
		if (*p == '"' || *p == '\\')
			printf("\\%c", *p);
		else if (*p < 0x20)
			printf("\\u%04x", *p);
		else
			putchar(*p);
	}
	putchar('"');
}

/* CUDA as the library finds it: loaded or why not, and the devices. */
static void print_cuda(bool json)
{
	lc_cuda_info_t ci = {.size = sizeof(ci)};
	lc_cuda_info(&ci);
	if (json) {
		printf("\"cuda\":{\"found\":%s,\"why\":", ci.found ? "true" : "false");
		json_value(ci.why, 1);
		printf(",\"driver\":%d,\"devices\":[", ci.driver_version);
	} else if (ci.found) {
		printf("cuda: found, driver %d.%d, %d device%s (%s)\n", ci.driver_version / 1000,
		       ci.driver_version % 1000 / 10, ci.device_count,
		       ci.device_count == 1 ? "" : "s", ci.library);
	} else {
		printf("cuda: not found (%s): host memory only\n", ci.why);
	}
	for (int i = 0; i < ci.device_count; i++) {
		lc_cuda_device_t d = {.size = sizeof(d)};
		if (lc_cuda_device(i, &d))
			continue;
		if (json) {
			printf("%s{\"ordinal\":%d,\"name\":", i ? "," : "", i);
			json_value(d.name, 1);
			printf(",\"pci\":");
			json_value(d.pci_bus_id, 1);
			printf(",\"memory\":%llu}", (unsigned long long)d.total_mem);
		} else {
			printf("cuda device %d: %s, pci %s, %llu MiB\n", i, d.name, d.pci_bus_id,
			       (unsigned long long)(d.total_mem >> 20));
		}
	}
	if (json)
		printf("]},");
}

int lc__cmd_info(int argc, char **argv)
{
	bool json = false, config_only = false;
	lc_ctx_t *ctx;
	if (lc__cli_wants_help(argc, argv)) {
		fputs(info_help, stdout);
		return 0;
	}
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json"))
			json = true;
		else if (!strcmp(argv[i], "--config"))
			config_only = true;
		else {
			fprintf(stderr, "layercake info: unknown option %s\n", argv[i]);
			return 2;
		}
	}
	int rc = lc_ctx_create(NULL, &ctx);
	if (rc) {
		fprintf(stderr, "layercake info: %s\n", lc_strerror(rc));
		return 1;
	}
	if (json) {
		printf("{\"version\":\"%s\",\"transports\":\"%s\",", lc_version(), lc_transports());
		if (!config_only)
			print_cuda(true);
		printf("\"config\":[");
		for (int i = 0; i < lc_config_count(); i++) {
			const lc_config_info_t *c = lc_config_info(i);
			char v[512] = "";
			lc_ctx_config_get(ctx, c->name, v, sizeof v);
			printf("%s{\"name\":\"%s\",\"env\":\"%s\",\"default\":", i ? "," : "",
			       c->name, c->env);
			json_value(c->default_str, c->is_text);
			printf(",\"value\":");
			json_value(v, c->is_text);
			printf(",\"text\":%s,\"help\":\"%s\"}", c->is_text ? "true" : "false",
			       c->help);
		}
		printf("]}\n");
	} else {
		if (!config_only) {
			printf("layercake %s\ntransports: %s\n", lc_version(), lc_transports());
			print_cuda(false);
			printf("\n");
		}
		printf("%-22s %-34s %9s %9s  %s\n", "knob", "environment", "default", "value",
		       "help");
		for (int i = 0; i < lc_config_count(); i++) {
			const lc_config_info_t *c = lc_config_info(i);
			char v[512] = "";
			lc_ctx_config_get(ctx, c->name, v, sizeof v);
			printf("%-22s %-34s %9s %9s  %s\n", c->name, c->env,
			       c->is_text && !*c->default_str ? "\"\"" : c->default_str,
			       c->is_text && !*v ? "\"\"" : v, c->help);
		}
	}
	lc_ctx_destroy(ctx);
	return 0;
}
