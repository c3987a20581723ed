/*
 * `layercake bench peers`: layercake against NIXL and Mooncake TE from their
 * PyPI wheels (docs/bench.md). The benchmark is Python, bench/peers/run.py,
 * run by the interpreter of the venv that `make bench-peers` makes with
 * scripts/peers-venv.sh; this entry point runs exactly what the Makefile
 * runs after making the venv: it finds the venv the way the script does
 * ($LAYERCAKE_CACHE, else ~/.cache/layercake), and run.py, the Python
 * package and the library in the source and build trees this binary was
 * built from (LC_SOURCE_DIR, LC_BINARY_DIR: CMakeLists.txt), then execs it.
 * It never makes the venv (about 200 MB of downloads): without one, or
 * without the library, it says how to make it and exits 3. Run by name only; the plain `layercake bench`
 * leaves it out (it takes minutes).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "cli.h"

#if !defined(LC_SOURCE_DIR) || !defined(LC_BINARY_DIR)
#error "LC_SOURCE_DIR and LC_BINARY_DIR are defined for this file by CMakeLists.txt"
#endif

enum { PATH_LEN = 4096 };

/* The venv's interpreter, where scripts/peers-venv.sh puts it. */
static void venv_python(char *buf, size_t len)
{
	const char *cache = getenv("LAYERCAKE_CACHE"), *home = getenv("HOME");
	if (cache && *cache)
		snprintf(buf, len, "%s/venv-peers/bin/python", cache);
	else
		snprintf(buf, len, "%s/.cache/layercake/venv-peers/bin/python",
			 home && *home ? home : "/root");
}

static void print_help(const char *py, const char *run, const char *lib)
{
	printf("NAME\n"
	       "    layercake bench peers - layercake against NIXL and Mooncake TE\n"
	       "\n"
	       "SYNOPSIS\n"
	       "    layercake bench peers [--pairs N] [--quick] [--idle-s S] [--timeout S]\n"
	       "                          [--transports tcp,shm] [--out-dir DIR] [--table JSON]\n"
	       "\n"
	       "DESCRIPTION\n"
	       "    Runs what `make bench-peers` runs once it has made the peers' venv:\n"
	       "        VENV/bin/python SOURCE/bench/peers/run.py --out-dir BUILD [options]\n"
	       "    with LAYERCAKE_LIB=BUILD/liblayercake.so (unless set) and SOURCE/python\n"
	       "    first on PYTHONPATH: every case of docs/bench.md for layercake, NIXL and\n"
	       "    Mooncake over tcp and shared memory, 3 pairs (minutes). It writes\n"
	       "    DIR/bench-peers-<UTC timestamp>.json, a copy at DIR/bench-peers.json and\n"
	       "    the libraries' log, and prints the markdown table. The options are\n"
	       "    run.py's (see its --help); a later --out-dir replaces BUILD. The plain\n"
	       "    `layercake bench` does not run it.\n"
	       "\n"
	       "    The venv holds the peers' PyPI wheels at the pins of\n"
	       "    bench/peers/requirements*.txt. This command only uses it: make it first\n"
	       "    with `make bench-peers` (which then runs the benchmark) or\n"
	       "    scripts/peers-venv.sh (about 200 MB of downloads the first time; either\n"
	       "    remakes it when the pins change).\n"
	       "\n"
	       "FILES\n"
	       "    VENV    %.*s (LAYERCAKE_CACHE moves it)\n"
	       "    SOURCE  %s\n"
	       "    BUILD   %s\n"
	       "    run.py  %s\n"
	       "    library %s\n"
	       "\n"
	       "EXIT STATUS\n"
	       "    run.py's: 0 when the JSON was written, 1 otherwise; 3 when the venv,\n"
	       "    run.py or the library is missing.\n",
	       (int)(strlen(py) - strlen("/bin/python")), py, LC_SOURCE_DIR, LC_BINARY_DIR, run,
	       lib);
}

int lc__bench_peers(int argc, char **argv)
{
	char py[PATH_LEN], run[PATH_LEN], lib[PATH_LEN], pypath[2 * PATH_LEN];
	venv_python(py, sizeof py);
	snprintf(run, sizeof run, "%s/bench/peers/run.py", LC_SOURCE_DIR);
	snprintf(lib, sizeof lib, "%s/liblayercake.so", LC_BINARY_DIR);
	if (lc__cli_wants_help(argc, argv)) {
		print_help(py, run, lib);
		return 0;
	}
	if (access(run, R_OK)) {
		fprintf(stderr,
			"layercake bench peers: %s: %s; the benchmark runs from the source tree "
			"this layercake was built from\n",
			run, strerror(errno));
		return 3;
	}
	if (access(py, X_OK)) {
		fprintf(stderr,
			"layercake bench peers: no peers venv (%s: %s): make it first with `make "
			"bench-peers` in %s, or %s/scripts/peers-venv.sh (about 200 MB of PyPI "
			"wheels)\n",
			py, strerror(errno), LC_SOURCE_DIR, LC_SOURCE_DIR);
		return 3;
	}
	const char *given = getenv("LAYERCAKE_LIB");
	if (!(given && *given) && access(lib, R_OK)) {
		fprintf(stderr,
			"layercake bench peers: %s: %s; build it first (make, or cmake --build %s "
			"--target layercake) or set LAYERCAKE_LIB\n",
			lib, strerror(errno), LC_BINARY_DIR);
		return 3;
	}
	const char *pp = getenv("PYTHONPATH");
	snprintf(pypath, sizeof pypath, "%s/python%s%s", LC_SOURCE_DIR, pp && *pp ? ":" : "",
		 pp && *pp ? pp : "");
	if (setenv("PYTHONPATH", pypath, 1) ||
	    (!(given && *given) && setenv("LAYERCAKE_LIB", lib, 1))) {
		perror("layercake bench peers: setenv");
		return 1;
	}
	char **args = calloc((size_t)argc + 4, sizeof *args);
	if (!args) {
		perror("layercake bench peers");
		return 1;
	}
	args[0] = py;
	args[1] = run;
	args[2] = "--out-dir";
	args[3] = LC_BINARY_DIR;
	for (int i = 1; i < argc; i++)
		args[3 + i] = argv[i];
	fflush(NULL);
	execv(py, args);
	fprintf(stderr, "layercake bench peers: cannot run %s: %s\n", py, strerror(errno));
	free(args);
	return 1;
}
