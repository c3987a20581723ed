/*
 * shm sender's CUDA IPC exports: a CUDA source region is exported to D once
 * per connection (a VMM fd, or else a legacy IPC handle of its
 * allocation), so that D copies device to device (docs/transport-shm.md);
 * and the message that passes a source region to D before its first write
 * (REGION or IPC_REGION, or a DROP of the oldest when D's table is full).
 */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>

#include "core/cuda.h"
#include "transport/shm/send_int.h"

pexport_t *lc__shm_export_find(shm_conn_t *sc, uint32_t id)
{
	for (size_t i = 0; i < sc->nexports; i++)
		if (sc->exports[i].rec.id == id)
			return &sc->exports[i];
	return NULL;
}

/* Export the allocation under CUDA region ri: its base and size, then a
 * VMM fd or else an IPC handle. false (logged) when it cannot be: a region
 * spanning allocations, memory the driver will not export. */
static bool export_make(shm_conn_t *sc, const lc__region_info_t *ri, pexport_t *e)
{
	CUdeviceptr p = (CUdeviceptr)(uintptr_t)ri->addr, base = 0;
	size_t size = 0;
	CUipcMemHandle h;
	*e = (pexport_t){.vmm_fd = -1, .rec = {.id = ri->id, .len = ri->len}};
	int rc = lc__cuda_mem_range(p, &base, &size);
	if (!rc && (p < base || ri->len > size - (p - base)))
		rc = LC_ENOTSUP;
	if (rc) {
		LC__INFO("%s: CUDA region %u is not one allocation (%s); its writes are staged",
			 sc->c->url, ri->id, lc_strerror(rc));
		return false;
	}
	int fd = -1;
	rc = lc__cuda_vmm_export(p, &fd);
	if (rc == -ENOENT) {
		rc = lc__cuda_ipc_get(base, &h);
		if (!rc)
			memcpy(e->rec.handle, h.reserved, sizeof e->rec.handle);
	} else if (!rc) {
		e->vmm_fd = fd;
		e->rec.flags = LC__SHM_IPC_VMM;
	}
	if (rc) {
		LC__INFO("%s: CUDA region %u cannot be exported (%s); its writes are staged",
			 sc->c->url, ri->id, lc_strerror(rc));
		return false;
	}
	e->rec.alloc_size = size;
	e->rec.offset = p - base;
	e->rec.base = base;
	lc__cuda_device_describe(ri->device, NULL, 0, e->rec.pci, sizeof e->rec.pci, NULL);
	LC__COUNT(sc->ctx, ipc_exports);
	LC__DEBUG("%s: exported CUDA region %u (%s, allocation of %zu bytes, at +%llu)", sc->c->url,
		  ri->id, fd >= 0 ? "VMM fd" : "IPC handle", size,
		  (unsigned long long)e->rec.offset);
	e->ok = true;
	return true;
}

bool lc__shm_exportable(shm_conn_t *sc, const lc__region_info_t *ri)
{
	pexport_t *e = lc__shm_export_find(sc, ri->id);
	if (e)
		return e->ok;
	if (sc->nexports == LC__SHM_MAX_EXPORTS)
		return false; /* staged: the table does not grow past its cap */
	if (!sc->exports && !(sc->exports = calloc(LC__SHM_MAX_EXPORTS, sizeof *sc->exports)))
		return false;
	e = &sc->exports[sc->nexports++];
	return export_make(sc, ri, e);
}

/* Under lock: the message that must go before a write from source region
 * ri that D does not hold: its REGION, or with D's table full, a DROP of
 * the oldest. D processes in order: writes already sent that name the
 * oldest are copied before the DROP. */
void lc__shm_build_region(shm_conn_t *sc, const lc__region_info_t *ri)
{
	if (sc->nsrcs == LC__SHM_MAX_SRC_REGIONS) {
		sc->out_len = lc__shm_put_drop(sc->out, sc->srcs[0]);
		memmove(sc->srcs, sc->srcs + 1, --sc->nsrcs * sizeof *sc->srcs);
		return;
	}
	if (ri->kind == LC_MEM_KIND_CUDA) {
		const pexport_t *e = lc__shm_export_find(sc, ri->id);
		sc->out_len = lc__shm_put_ipc_region(sc->out, &e->rec);
		sc->out_fd = e->vmm_fd >= 0 ? fcntl(e->vmm_fd, F_DUPFD_CLOEXEC, 0) : -1;
		sc->srcs[sc->nsrcs++] = ri->id;
		return;
	}
	int fd = ri->memfd >= 0 ? fcntl(ri->memfd, F_DUPFD_CLOEXEC, 0) : -1;
	lc__shm_region_t r = {.id = ri->id,
			      .flags = fd >= 0 ? LC__SHM_REGION_FD : 0,
			      .addr = (uint64_t)(uintptr_t)ri->addr,
			      .len = ri->len,
			      .offset = ri->memfd_offset};
	sc->out_len = lc__shm_put_region(sc->out, &r);
	sc->out_fd = fd;
	sc->srcs[sc->nsrcs++] = ri->id;
}
