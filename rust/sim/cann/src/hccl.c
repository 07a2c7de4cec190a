/* The simulated libhccl.so: communicators and collectives (hccl/hccl.h). A process's ranks (one
 * thread per device, HcclCommInitAll) share one communicator group; each rank's collective is
 * placed on its own stream by the simulated device when MSPTI intercepts it. Results are computed
 * as if every rank contributed the same data (the samples' ranks do): a SUM all-reduce multiplies
 * fp32 elements by the rank count, a gather repeats the buffer. Other data types are not
 * reduced: their result is the input, so an in-place collective of them (recvBuf == sendBuf, as
 * torch's process groups issue gradient all-reduces) moves no data. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "hccl/hccl.h"
#include "sim_hal.h"

#define HOST_NS_COLLECTIVE 8000

struct SimComm {
    uint32_t rank;
    uint32_t nranks;
    char name[ROOTINFO_INDENTIFIER_MAX_LENGTH];
};

static atomic_uint g_comm_seq;

/* CANN's communicator names: "<server ip>%<interface>_<port>_<index>_<16-digit timestamp>". */
static void comm_name(char *out, size_t len)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    unsigned long long us = (unsigned long long)tv.tv_sec * 1000000ULL + (unsigned long long)tv.tv_usec;
    snprintf(out, len, "127.0.0.1%%lo_60000_%u_%016llu", atomic_fetch_add(&g_comm_seq, 1), us % 10000000000000000ULL);
}

HcclResult HcclCommInitAll(uint32_t ndev, int32_t *devices, HcclComm *comms)
{
    if (ndev == 0 || devices == NULL || comms == NULL) {
        return HCCL_E_PARA;
    }
    char name[ROOTINFO_INDENTIFIER_MAX_LENGTH];
    comm_name(name, sizeof name);
    for (uint32_t i = 0; i < ndev; i++) {
        struct SimComm *c = calloc(1, sizeof *c);
        if (c == NULL) {
            return HCCL_E_MEMORY;
        }
        c->rank = i;
        c->nranks = ndev;
        memcpy(c->name, name, sizeof name);
        comms[i] = c;
    }
    msimHostWork(100000);
    return HCCL_SUCCESS;
}

HcclResult HcclGetRootInfo(HcclRootInfo *rootInfo)
{
    if (rootInfo == NULL) {
        return HCCL_E_PTR;
    }
    memset(rootInfo, 0, sizeof *rootInfo);
    comm_name(rootInfo->internal, ROOTINFO_INDENTIFIER_MAX_LENGTH);
    return HCCL_SUCCESS;
}

/* The root info carries the group's name (what HcclGetRootInfo wrote, or any name a launcher put
 * there), so every rank of the group names its communicator alike. */
HcclResult HcclCommInitRootInfo(uint32_t nRanks, const HcclRootInfo *rootInfo, uint32_t rank, HcclComm *comm)
{
    if (rootInfo == NULL || comm == NULL || nRanks == 0 || rank >= nRanks) {
        return HCCL_E_PARA;
    }
    struct SimComm *c = calloc(1, sizeof *c);
    if (c == NULL) {
        return HCCL_E_MEMORY;
    }
    c->rank = rank;
    c->nranks = nRanks;
    memcpy(c->name, rootInfo->internal, sizeof c->name - 1);
    *comm = c;
    msimHostWork(100000);
    return HCCL_SUCCESS;
}

HcclResult HcclCommDestroy(HcclComm comm)
{
    if (comm == NULL) {
        return HCCL_E_PTR;
    }
    free(comm);
    return HCCL_SUCCESS;
}

HcclResult HcclGetRankSize(HcclComm comm, uint32_t *rankSize)
{
    if (comm == NULL || rankSize == NULL) {
        return HCCL_E_PTR;
    }
    *rankSize = ((struct SimComm *)comm)->nranks;
    return HCCL_SUCCESS;
}

HcclResult HcclGetRankId(HcclComm comm, uint32_t *rank)
{
    if (comm == NULL || rank == NULL) {
        return HCCL_E_PTR;
    }
    *rank = ((struct SimComm *)comm)->rank;
    return HCCL_SUCCESS;
}

HcclResult HcclGetCommName(HcclComm comm, char *commName)
{
    if (comm == NULL || commName == NULL) {
        return HCCL_E_PTR;
    }
    memcpy(commName, ((struct SimComm *)comm)->name, ROOTINFO_INDENTIFIER_MAX_LENGTH);
    return HCCL_SUCCESS;
}

static size_t elem_size(HcclDataType t)
{
    static const size_t sizes[] = {1, 2, 4, 2, 4, 8, 8, 1, 2, 4, 8, 2, 16};
    return (unsigned)t < sizeof sizes / sizeof sizes[0] ? sizes[t] : 0;
}

HcclResult HcclAllReduce(void *sendBuf, void *recvBuf, uint64_t count, HcclDataType dataType, HcclReduceOp op,
                         HcclComm comm, aclrtStream stream)
{
    (void)stream;
    size_t es = elem_size(dataType);
    if (sendBuf == NULL || recvBuf == NULL || comm == NULL || es == 0) {
        return HCCL_E_PARA;
    }
    uint32_t n = ((struct SimComm *)comm)->nranks;
    if (recvBuf != sendBuf) {
        memmove(recvBuf, sendBuf, count * es);
    }
    if (op == HCCL_REDUCE_SUM && dataType == HCCL_DATA_TYPE_FP32) {
        for (uint64_t i = 0; i < count; i++) {
            ((float *)recvBuf)[i] *= (float)n;
        }
    }
    msimHostWork(HOST_NS_COLLECTIVE);
    return HCCL_SUCCESS;
}

HcclResult HcclBroadcast(void *buf, uint64_t count, HcclDataType dataType, uint32_t root, HcclComm comm,
                         aclrtStream stream)
{
    (void)count;
    (void)stream;
    if (buf == NULL || comm == NULL || elem_size(dataType) == 0 || root >= ((struct SimComm *)comm)->nranks) {
        return HCCL_E_PARA;
    }
    msimHostWork(HOST_NS_COLLECTIVE);
    return HCCL_SUCCESS;
}

HcclResult HcclAllGather(void *sendBuf, void *recvBuf, uint64_t sendCount, HcclDataType dataType, HcclComm comm,
                         aclrtStream stream)
{
    size_t es = elem_size(dataType);
    if (sendBuf == NULL || recvBuf == NULL || comm == NULL || es == 0) {
        return HCCL_E_PARA;
    }
    uint32_t n = ((struct SimComm *)comm)->nranks;
    /* The device moves the data (queued on the stream, done when the host or another stream waits
     * for it); in place, the rank's own slot is the send buffer already. */
    for (uint32_t r = 0; r < n; r++) {
        char *slot = (char *)recvBuf + r * sendCount * es;
        if (slot != (char *)sendBuf) {
            msimQueueCopy(stream, slot, sendBuf, sendCount * es);
        }
    }
    msimHostWork(HOST_NS_COLLECTIVE);
    return HCCL_SUCCESS;
}

HcclResult HcclReduceScatter(void *sendBuf, void *recvBuf, uint64_t recvCount, HcclDataType dataType,
                             HcclReduceOp op, HcclComm comm, aclrtStream stream)
{
    (void)stream;
    size_t es = elem_size(dataType);
    if (sendBuf == NULL || recvBuf == NULL || comm == NULL || es == 0) {
        return HCCL_E_PARA;
    }
    struct SimComm *c = comm;
    char *own = (char *)sendBuf + c->rank * recvCount * es;
    if ((char *)recvBuf != own) {
        memmove(recvBuf, own, recvCount * es);
    }
    if (op == HCCL_REDUCE_SUM && dataType == HCCL_DATA_TYPE_FP32) {
        for (uint64_t i = 0; i < recvCount; i++) {
            ((float *)recvBuf)[i] *= (float)c->nranks;
        }
    }
    msimHostWork(HOST_NS_COLLECTIVE);
    return HCCL_SUCCESS;
}

/* Like every collective here it does not wait for the other ranks; in a multi-process job the
 * preloaded simulator makes each collective meet its peers first (rust/sim/src/model/multirank.rs). */
HcclResult HcclBarrier(HcclComm comm, aclrtStream stream)
{
    (void)stream;
    if (comm == NULL) {
        return HCCL_E_PARA;
    }
    msimHostWork(HOST_NS_COLLECTIVE);
    return HCCL_SUCCESS;
}
