/*
 * Coverage builds only (LC_COVERAGE): many tests fork children that end
 * with _exit(), which skips gcov's dump at exit, so whatever a child ran
 * (a D receiver, a P under attack) would count as never run. Every
 * executable is linked with --wrap=_exit: its _exit() comes here, which
 * dumps the counters first.
 */

extern void __gcov_dump(void);
extern void __real__exit(int status) __attribute__((noreturn));

void __wrap__exit(int status);

void __wrap__exit(int status)
{
	__gcov_dump();
	__real__exit(status);
}
