/* The configuration table and its environment loading. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/common.h"
#include "core/config.h"

#define LC__STR2(x) #x
#define LC__STR(x) LC__STR2(x)

/* The integer knobs, then the text knobs: the public listing. */
static const lc_config_info_t table[] = {
#define LC__CFG_INFO(field, env, def, lo, hi, help)                                                \
	{#field, env, LC__STR(def), help, (lo), (hi), 0},
	LC__CONFIG_TABLE(LC__CFG_INFO)
#undef LC__CFG_INFO
#define LC__CFGS_INFO(field, env, def, help) {#field, env, def, help, 0, 0, 1},
		LC__CONFIG_STR_TABLE(LC__CFGS_INFO)
#undef LC__CFGS_INFO
};

static const int64_t defaults[] = {
#define LC__CFG_DEF(field, env, def, lo, hi, help) (def),
	LC__CONFIG_TABLE(LC__CFG_DEF)
#undef LC__CFG_DEF
};

int lc_config_count(void)
{
	return (int)LC__ARRAY_SIZE(table);
}

const lc_config_info_t *lc_config_info(int index)
{
	if (index < 0 || index >= lc_config_count())
		return NULL;
	return &table[index];
}

int lc__config_find(const char *name)
{
	if (!name)
		return -EINVAL;
	for (int i = 0; i < LC__CFG_COUNT; i++)
		if (!strcmp(table[i].name, name))
			return i;
	return -ENOENT;
}

/* Knobs whose values have names as well (the help text lists them). */
static const struct {
	const char *field, *name;
	int64_t value;
} named_values[] = {
	{"ucx_data", "am", 0},
	{"ucx_data", "put", 1},
	{"ucx_err_mode", "peer", 0},
	{"ucx_err_mode", "none", 1},
};

static int parse_name(int index, const char *text, long long *v)
{
	for (size_t i = 0; i < LC__ARRAY_SIZE(named_values); i++) {
		if (!strcmp(named_values[i].field, table[index].name) &&
		    !strcmp(named_values[i].name, text)) {
			*v = named_values[i].value;
			return 0;
		}
	}
	return -EINVAL;
}

int lc__config_parse(int index, const char *text, int64_t *out)
{
	char *end;
	long long v;
	if (index < 0 || index >= LC__CFG_COUNT || !text || !*text)
		return -EINVAL;
	errno = 0;
	v = strtoll(text, &end, 10);
	if ((errno || *end != '\0') && parse_name(index, text, &v))
		return -EINVAL;
	if (v < table[index].min || v > table[index].max)
		return -ERANGE;
	*out = v;
	return 0;
}

/* Knob i from the environment into *v (left alone when unset or bad). */
static void load_one(int i, int64_t *v)
{
	const char *env = getenv(table[i].env);
	int64_t x;
	if (!env)
		return;
	int rc = lc__config_parse(i, env, &x);
	if (rc) {
		LC__WARN("ignoring %s=%s: %s (allowed %lld..%lld)", table[i].env, env,
			 lc_strerror(rc), (long long)table[i].min, (long long)table[i].max);
		return;
	}
	*v = x;
}

void lc__config_load(lc__config_t *cfg)
{
	for (int i = 0; i < LC__CFG_COUNT; i++) {
		cfg->values[i] = defaults[i];
		load_one(i, &cfg->values[i]);
	}
}

int64_t lc__config_env_int(enum lc__config_field field)
{
	int64_t v = defaults[field];
	load_one((int)field, &v);
	return v;
}

int lc__config_find_str(const char *name)
{
	if (!name)
		return -EINVAL;
	for (int i = 0; i < LC__CFGS_COUNT; i++)
		if (!strcmp(table[LC__CFG_COUNT + i].name, name))
			return i;
	return -ENOENT;
}

const char *lc__config_env_str(enum lc__config_str_field field)
{
	const lc_config_info_t *c = &table[LC__CFG_COUNT + field];
	const char *v = getenv(c->env);
	if (!v || !*v)
		v = c->default_str;
	return *v ? v : NULL;
}

/* The log level at start comes from the table like every knob; config.c
 * sets it (log.c knows nothing of the table, so the two never loop). */
__attribute__((constructor)) static void log_level_from_env(void)
{
	lc_log_level_t level;
	const char *text = lc__config_env_str(LC__CFGS_log);
	if (text && lc_log_level_parse(text, &level) == 0)
		lc_log_set_level(level);
}
