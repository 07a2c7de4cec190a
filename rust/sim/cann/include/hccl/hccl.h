/* HCCL's collective API (hccl/hccl.h, libhccl.so) as the simulated CANN tree implements it, with
 * the signatures of Huawei's public CANN API reference (HCCL). Part of mspti-lens's simulated CANN
 * tree (docs/simulated_cann.md). */
#ifndef SIM_HCCL_H_
#define SIM_HCCL_H_

#include "hccl/hccl_types.h"
#include "acl/acl_base.h"

#ifdef __cplusplus
extern "C" {
#endif

HcclResult HcclCommInitAll(uint32_t ndev, int32_t *devices, HcclComm *comms);
HcclResult HcclGetRootInfo(HcclRootInfo *rootInfo);
HcclResult HcclCommInitRootInfo(uint32_t nRanks, const HcclRootInfo *rootInfo, uint32_t rank, HcclComm *comm);
HcclResult HcclCommDestroy(HcclComm comm);
HcclResult HcclGetRankSize(HcclComm comm, uint32_t *rankSize);
HcclResult HcclGetRankId(HcclComm comm, uint32_t *rank);
HcclResult HcclGetCommName(HcclComm comm, char *commName);
HcclResult HcclAllReduce(void *sendBuf, void *recvBuf, uint64_t count, HcclDataType dataType, HcclReduceOp op,
                         HcclComm comm, aclrtStream stream);
HcclResult HcclBroadcast(void *buf, uint64_t count, HcclDataType dataType, uint32_t root, HcclComm comm,
                         aclrtStream stream);
HcclResult HcclAllGather(void *sendBuf, void *recvBuf, uint64_t sendCount, HcclDataType dataType, HcclComm comm,
                         aclrtStream stream);
HcclResult HcclReduceScatter(void *sendBuf, void *recvBuf, uint64_t recvCount, HcclDataType dataType,
                             HcclReduceOp op, HcclComm comm, aclrtStream stream);
HcclResult HcclBarrier(HcclComm comm, aclrtStream stream);

#ifdef __cplusplus
}
#endif

#endif
