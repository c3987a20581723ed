/* The CURVE keys this process trusts (curve_keys.h). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "control/channel.h"
#include "control/curve_keys.h"
#include "core/config.h"

/* 1 if a line of dir/name (comments and blank lines aside) is z85. */
static int file_has(const char *dir, const char *name, const char *z85)
{
	char path[PATH_MAX], line[128];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	FILE *f = fopen(path, "r");
	if (!f)
		return errno == ENOENT ? 0 : -errno;
	int found = 0;
	while (!found && fgets(line, sizeof line, f)) {
		line[strcspn(line, "\r\n")] = '\0';
		found = line[0] && line[0] != '#' && !strcmp(line, z85);
	}
	fclose(f);
	return found;
}

int lc__curve_key_authorized(const char *z85)
{
	const char *dir = lc__config_env_str(LC__CFGS_secret_dir);
	if (!z85 || strlen(z85) != LC__CHAN_KEY_LEN || !dir || !dir[0])
		return 0;
	int rc = file_has(dir, "curve.public", z85);
	return rc ? rc : file_has(dir, "authorized_keys", z85);
}
