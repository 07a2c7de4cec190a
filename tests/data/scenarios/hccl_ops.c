/* Scenario 4 of the Callback API guide: the HCCL domain traced, each callback naming its
 * collective by callback id. Usage: hccl_ops [STEPS] */
#include <stdio.h>
#include <stdlib.h>

#include "mspti.h"
#include "work.h"

static const char *op_name(msptiCallbackId cbid)
{
    switch (cbid) {
    case MSPTI_CBID_HCCL_ALLREDUCE: return "AllReduce";
    case MSPTI_CBID_HCCL_BROADCAST: return "Broadcast";
    case MSPTI_CBID_HCCL_ALLGATHER: return "AllGather";
    case MSPTI_CBID_HCCL_REDUCE_SCATTER: return "ReduceScatter";
    case MSPTI_CBID_HCCL_REDUCE: return "Reduce";
    case MSPTI_CBID_HCCL_ALL_TO_ALL: return "AlltoAll";
    case MSPTI_CBID_HCCL_ALL_TO_ALLV: return "AlltoAllV";
    case MSPTI_CBID_HCCL_BARRIER: return "Barrier";
    case MSPTI_CBID_HCCL_SCATTER: return "Scatter";
    case MSPTI_CBID_HCCL_SEND: return "Send";
    case MSPTI_CBID_HCCL_RECV: return "Recv";
    case MSPTI_CBID_HCCL_SENDRECV: return "BatchSendRecv";
    default: return "Unknown";
    }
}

static void on_collective(void *userdata, msptiCallbackDomain domain, msptiCallbackId cbid,
                          const msptiCallbackData *cbdata)
{
    (void)userdata;
    if (domain != MSPTI_CB_DOMAIN_HCCL) return;
    printf("[HCCL] %s %s\n", cbdata->callbackSite == MSPTI_API_ENTER ? "ENTER" : "EXIT", op_name(cbid));
}

int main(int argc, char **argv)
{
    int steps = argc > 1 ? atoi(argv[1]) : 3;
    msptiSubscriberHandle subscriber;
    if (msptiSubscribe(&subscriber, on_collective, NULL) != MSPTI_SUCCESS) return 1;
    if (msptiEnableDomain(1, subscriber, MSPTI_CB_DOMAIN_HCCL) != MSPTI_SUCCESS) return 2;
    ScenarioWork *w = scenario_open();
    if (w == NULL || scenario_steps(w, steps) || scenario_close(w)) return 3;
    msptiUnsubscribe(subscriber);
    return 0;
}
