/* SPDX-License-Identifier: MIT */
/* NCCL's calls that take a communicator and neither make nor end one:
 * passed on with NCCL's communicator behind the job's handle; answered
 * without waiting, from what was kept, while it is taken apart (PyTorch's
 * watchdog asks all the time); counted where what they make keeps it from
 * being taken apart; reduction operators behind ids of the interposer's
 * (nccl-shim-comms.c says why the handles are the interposer's). */
#include <pthread.h>
#include <string.h>

#include "shim-comms.h"

/* ---- calls passed on with NCCL's communicator ---- */

#define THROUGH(name, params, args, type)                                                          \
	EXPORT nccl_result name params                                                             \
	{                                                                                          \
		nccl_comm real;                                                                    \
		nccl_result r;                                                                     \
		int slot;                                                                          \
                                                                                                   \
		REAL(name, type);                                                                  \
		if (shim_enter(comm, &real, &slot) != NCCL_SUCCESS)                                \
			return NCCL_INTERNAL_ERROR;                                                \
		r = fn_##name args;                                                                \
		shim_leave(slot);                                                                  \
		return r;                                                                          \
	}

THROUGH(ncclCommFinalize, (nccl_comm comm), (real), nccl_result (*)(nccl_comm))
THROUGH(ncclCommRevoke, (nccl_comm comm, int flags), (real, flags), nccl_result (*)(nccl_comm, int))
THROUGH(ncclCommGetUniqueId, (nccl_comm comm, nccl_unique_id *id), (real, id),
	nccl_result (*)(nccl_comm, nccl_unique_id *))
THROUGH(ncclCommSuspend, (nccl_comm comm, int flags), (real, flags),
	nccl_result (*)(nccl_comm, int))
THROUGH(ncclCommResume, (nccl_comm comm), (real), nccl_result (*)(nccl_comm))
THROUGH(ncclCommMemStats, (nccl_comm comm, int stat, uint64_t *value), (real, stat, value),
	nccl_result (*)(nccl_comm, int, uint64_t *))
THROUGH(ncclWinGetUserPtr, (nccl_comm comm, void *win, void **ptr), (real, win, ptr),
	nccl_result (*)(nccl_comm, void *, void **))
THROUGH(ncclGinBarrierCreateRequirement,
	(nccl_comm comm, void *team, int n, void *handle, void *req), (real, team, n, handle, req),
	nccl_result (*)(nccl_comm, void *, int, void *, void *))

/* ---- questions answered while the communicators are taken apart ----
 * PyTorch's watchdog asks for a communicator's errors all the time: it
 * must neither wait for a checkpoint nor see an error then. */

/* Into NCCL with handle where the communicators are the job's (as
 * enter); where they are taken apart, or being, false at once, with the
 * answer kept to give. */
static bool enter_or_keep(nccl_comm comm, nccl_comm *real, int *slot)
{
	*slot = shim_slot_of(comm);
	*real = comm;
	if (*slot < 0)
		return true;
	shim_inside_add();
	if (!shim_gate_open() && !shim_servicing) {
		shim_inside_drop();
		return false;
	}
	*real = shim_real_comm(*slot);
	return true;
}

EXPORT nccl_result ncclCommGetAsyncError(nccl_comm comm, nccl_result *error)
{
	nccl_comm real;
	nccl_result r;
	int slot;

	REAL(ncclCommGetAsyncError, nccl_result(*)(nccl_comm, nccl_result *));
	if (!enter_or_keep(comm, &real, &slot)) {
		*error = shim_gate_failed() ? NCCL_INTERNAL_ERROR : NCCL_SUCCESS;
		return NCCL_SUCCESS;
	}
	r = fn_ncclCommGetAsyncError(real, error);
	shim_leave(slot);
	return r;
}

/* The size, rank and device a communicator had, until it is back. */
#define KEPT_INT(name, field)                                                                      \
	EXPORT nccl_result name(nccl_comm comm, int *value)                                        \
	{                                                                                          \
		nccl_comm real;                                                                    \
		nccl_result r;                                                                     \
		int slot;                                                                          \
                                                                                                   \
		REAL(name, nccl_result (*)(nccl_comm, int *));                                     \
		if (!enter_or_keep(comm, &real, &slot)) {                                          \
			if (shim_handles[slot].field >= 0) {                                       \
				*value = shim_handles[slot].field;                                 \
				return NCCL_SUCCESS;                                               \
			}                                                                          \
			if (shim_enter(comm, &real, &slot) != NCCL_SUCCESS) /* not known yet */    \
				return NCCL_INTERNAL_ERROR;                                        \
		}                                                                                  \
		r = fn_##name(real, value);                                                        \
		shim_leave(slot);                                                                  \
		return r;                                                                          \
	}

KEPT_INT(ncclCommCount, nranks)
KEPT_INT(ncclCommUserRank, rank)
KEPT_INT(ncclCommCuDevice, device)

EXPORT const char *ncclGetLastError(nccl_comm comm)
{
	static const char *(*fn)(nccl_comm);
	nccl_comm real;
	const char *s;
	int slot;

	if (!fn)
		fn = (const char *(*)(nccl_comm))shim_real("ncclGetLastError");
	if (!fn)
		return "";
	if (!enter_or_keep(comm, &real, &slot))
		return shim_gate_failed() ? "the communicator could not be made again after a "
					    "checkpoint"
					  : "";
	s = fn(real);
	shim_leave(slot);
	return s;
}

/* ---- NCCL's device API, on the host: passed on ---- */

struct nccl_team {
	int nranks, rank, stride;
};

#define TEAM(name)                                                                                 \
	EXPORT struct nccl_team name(nccl_comm comm)                                               \
	{                                                                                          \
		static struct nccl_team (*fn)(nccl_comm);                                          \
		struct nccl_team t = {0, 0, 0};                                                    \
		nccl_comm real;                                                                    \
		int slot;                                                                          \
                                                                                                   \
		if (!fn)                                                                           \
			fn = (struct nccl_team(*)(nccl_comm))shim_real(#name);                     \
		if (!fn || shim_enter(comm, &real, &slot) != NCCL_SUCCESS)                         \
			return t;                                                                  \
		t = fn(real);                                                                      \
		shim_leave(slot);                                                                  \
		return t;                                                                          \
	}

TEAM(ncclTeamWorld)
TEAM(ncclTeamLsa)
TEAM(ncclTeamRail)

#define TEAM_RANK(name)                                                                            \
	EXPORT int name(nccl_comm comm, struct nccl_team team, int rank)                           \
	{                                                                                          \
		static int (*fn)(nccl_comm, struct nccl_team, int);                                \
		nccl_comm real;                                                                    \
		int slot, r;                                                                       \
                                                                                                   \
		if (!fn)                                                                           \
			fn = (int (*)(nccl_comm, struct nccl_team, int))shim_real(#name);          \
		if (!fn || shim_enter(comm, &real, &slot) != NCCL_SUCCESS)                         \
			return -1;                                                                 \
		r = fn(real, team, rank);                                                          \
		shim_leave(slot);                                                                  \
		return r;                                                                          \
	}

TEAM_RANK(ncclTeamRankToWorld)
TEAM_RANK(ncclTeamRankToLsa)

THROUGH(ncclCommQueryProperties, (nccl_comm comm, void *props), (real, props),
	nccl_result (*)(nccl_comm, void *))

/* ---- what a communicator holds: counted, refused while it lives ---- */

#define HELD(name, params, args, type, field, delta)                                               \
	EXPORT nccl_result name params                                                             \
	{                                                                                          \
		nccl_comm real;                                                                    \
		nccl_result r;                                                                     \
		int slot;                                                                          \
                                                                                                   \
		REAL(name, type);                                                                  \
		if (shim_enter(comm, &real, &slot) != NCCL_SUCCESS)                                \
			return NCCL_INTERNAL_ERROR;                                                \
		r = fn_##name args;                                                                \
		if (r == NCCL_SUCCESS && slot >= 0) {                                              \
			pthread_mutex_lock(&shim_comms_lock);                                      \
			if (delta > 0 || shim_handles[slot].field > 0)                             \
				shim_handles[slot].field += (unsigned int)(delta);                 \
			shim_update_unsafe();                                                      \
			pthread_mutex_unlock(&shim_comms_lock);                                    \
		}                                                                                  \
		shim_leave(slot);                                                                  \
		return r;                                                                          \
	}

HELD(ncclCommRegister, (nccl_comm comm, void *buf, size_t size, void **handle),
     (real, buf, size, handle), nccl_result (*)(nccl_comm, void *, size_t, void **), registered, 1)
HELD(ncclCommDeregister, (nccl_comm comm, void *handle), (real, handle),
     nccl_result (*)(nccl_comm, void *), registered, -1)
HELD(ncclCommWindowRegister, (nccl_comm comm, void *buf, size_t size, void **win, int flags),
     (real, buf, size, win, flags), nccl_result (*)(nccl_comm, void *, size_t, void **, int),
     windows, 1)
HELD(ncclCommWindowDeregister, (nccl_comm comm, void *win), (real, win),
     nccl_result (*)(nccl_comm, void *), windows, -1)
HELD(ncclDevCommCreate, (nccl_comm comm, const void *reqs, void *dev), (real, reqs, dev),
     nccl_result (*)(nccl_comm, const void *, void *), device_comms, 1)
HELD(ncclDevCommDestroy, (nccl_comm comm, const void *dev), (real, dev),
     nccl_result (*)(nccl_comm, const void *), device_comms, -1)

/* ---- reduction operators, made again with their communicator ---- */

static size_t datatype_size(int t)
{
	/* ncclInt8 .. ncclFloat8e5m2 */
	static const unsigned char sizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};

	return t >= 0 && t < (int)sizeof(sizes) ? sizes[t] : 0;
}

int shim_real_op(int slot, int op)
{
	int i = op - SYNTHETIC_OP(slot, 0);

	if (slot < 0 || i < 0 || i >= OPS_MAX || !shim_handles[slot].ops[i].used)
		return op;
	return shim_handles[slot].ops[i].real;
}

EXPORT nccl_result ncclRedOpCreatePreMulSum(int *op, void *scalar, int datatype, int residence,
					    nccl_comm comm)
{
	nccl_comm real;
	nccl_result r;
	int slot;

	REAL(ncclRedOpCreatePreMulSum, nccl_result(*)(int *, void *, int, int, nccl_comm));
	if (shim_enter(comm, &real, &slot) != NCCL_SUCCESS)
		return NCCL_INTERNAL_ERROR;
	r = fn_ncclRedOpCreatePreMulSum(op, scalar, datatype, residence, real);
	if (r == NCCL_SUCCESS && slot >= 0 && shim_wrap_handles == 1) {
		struct shim_handle *h = &shim_handles[slot];
		size_t size = residence == SCALAR_DEVICE ? sizeof(void *) : datatype_size(datatype);
		int i;

		pthread_mutex_lock(&shim_comms_lock);
		for (i = 0; i < OPS_MAX && h->ops[i].used; i++)
			;
		if (i < OPS_MAX && size) {
			struct redop *o = &h->ops[i];

			*o = (struct redop){.used = true,
					    .real = *op,
					    .datatype = datatype,
					    .residence = residence};
			memcpy(o->scalar, residence == SCALAR_DEVICE ? (void *)&scalar : scalar,
			       size);
			*op = SYNTHETIC_OP(slot, i);
		} else {
			shim_add_unsafe(NCCL_UNSAFE_OPS);
		}
		shim_update_unsafe();
		pthread_mutex_unlock(&shim_comms_lock);
	}
	shim_leave(slot);
	return r;
}

EXPORT nccl_result ncclRedOpDestroy(int op, nccl_comm comm)
{
	nccl_comm real;
	nccl_result r;
	int slot;

	REAL(ncclRedOpDestroy, nccl_result(*)(int, nccl_comm));
	if (shim_enter(comm, &real, &slot) != NCCL_SUCCESS)
		return NCCL_INTERNAL_ERROR;
	r = fn_ncclRedOpDestroy(shim_real_op(slot, op), real);
	if (r == NCCL_SUCCESS && slot >= 0) {
		int i = op - SYNTHETIC_OP(slot, 0);

		if (i >= 0 && i < OPS_MAX)
			shim_handles[slot].ops[i].used = false;
	}
	shim_leave(slot);
	return r;
}

/* NCCL's profiling names (pnccl...) reach the same wrappers: a job that
 * calls them holds the same handles. */
PROFILING_NAME(ncclCommCount)
PROFILING_NAME(ncclCommCuDevice)
PROFILING_NAME(ncclCommDeregister)
PROFILING_NAME(ncclCommFinalize)
PROFILING_NAME(ncclCommGetAsyncError)
PROFILING_NAME(ncclCommGetUniqueId)
PROFILING_NAME(ncclCommMemStats)
PROFILING_NAME(ncclCommQueryProperties)
PROFILING_NAME(ncclCommRegister)
PROFILING_NAME(ncclCommResume)
PROFILING_NAME(ncclCommRevoke)
PROFILING_NAME(ncclCommSuspend)
PROFILING_NAME(ncclCommUserRank)
PROFILING_NAME(ncclCommWindowDeregister)
PROFILING_NAME(ncclCommWindowRegister)
PROFILING_NAME(ncclDevCommCreate)
PROFILING_NAME(ncclDevCommDestroy)
PROFILING_NAME(ncclGetLastError)
PROFILING_NAME(ncclGinBarrierCreateRequirement)
PROFILING_NAME(ncclRedOpCreatePreMulSum)
PROFILING_NAME(ncclRedOpDestroy)
PROFILING_NAME(ncclTeamLsa)
PROFILING_NAME(ncclTeamRail)
PROFILING_NAME(ncclTeamRankToLsa)
PROFILING_NAME(ncclTeamRankToWorld)
PROFILING_NAME(ncclTeamWorld)
PROFILING_NAME(ncclWinGetUserPtr)
