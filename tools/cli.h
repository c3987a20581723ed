/* Subcommands of the CLI. Each takes argv starting at its own name. */
#ifndef LC_CLI_H
#define LC_CLI_H
#include <stdbool.h>

#include "layercake.h"

typedef struct lc_cli_command {
	const char *name;
	const char *summary;
	int (*run)(int argc, char **argv);
} lc_cli_command_t;

int lc__cmd_info(int argc, char **argv);
int lc__cmd_demo(int argc, char **argv);
int lc__cmd_bench(int argc, char **argv);
int lc__cmd_bootstrap(int argc, char **argv);

/* Why a call failed with rc: the library's recorded reason for it
 * (lc_last_error) when it has one, else lc_strerror(rc). */
static inline const char *lc__cli_why(int rc)
{
	return lc_last_error_code() == rc && lc_last_error()[0] ? lc_last_error() : lc_strerror(rc);
}

/* True if argv has --help or -h. */
bool lc__cli_wants_help(int argc, char **argv);

#endif
