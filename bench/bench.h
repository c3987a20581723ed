/*
 * Benchmarks behind `layercake bench <name>`. Each prints human text on a
 * terminal, or exactly one JSON object on stdout with --json (logs go to
 * stderr). Entry points are weak so that the CLI links while a benchmark is
 * being written; a missing one reports "not built".
 */
#ifndef LC_BENCH_H
#define LC_BENCH_H

int lc__bench_transport(int argc, char **argv) __attribute__((weak));
int lc__bench_planner(int argc, char **argv) __attribute__((weak));
int lc__bench_wake(int argc, char **argv) __attribute__((weak));
int lc__bench_control(int argc, char **argv) __attribute__((weak));
int lc__bench_checksum(int argc, char **argv) __attribute__((weak));
int lc__bench_strided(int argc, char **argv) __attribute__((weak));

#endif
