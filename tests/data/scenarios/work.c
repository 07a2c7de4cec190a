#include "work.h"

#include <stdlib.h>

#include "aclnnop/aclnn_add.h"
#include "aclnnop/aclnn_matmul.h"
#include "hccl/hccl.h"

#define N 16 /* elements per buffer: a 4 x 4 matrix */

struct ScenarioWork {
    aclrtStream stream;
    void *a, *b, *c;
    aclTensor *ta, *tb, *tc, *ma, *mb, *mc;
    aclScalar *alpha;
    float one;
    HcclComm comms[2];
};

static aclTensor *tensor(void *data, int64_t rows, int64_t cols)
{
    int64_t shape[2] = {rows, cols}, stride[2] = {cols, 1};
    return aclCreateTensor(shape, 2, ACL_FLOAT, stride, 0, ACL_FORMAT_ND, shape, 2, data);
}

ScenarioWork *scenario_open(void)
{
    ScenarioWork *w = calloc(1, sizeof *w);
    int32_t devices[2] = {0, 1};
    if (w == NULL || aclrtSetDevice(0) || aclrtCreateStream(&w->stream)) return NULL;
    if (aclrtMalloc(&w->a, N * sizeof(float), ACL_MEM_MALLOC_HUGE_FIRST)
        || aclrtMalloc(&w->b, N * sizeof(float), ACL_MEM_MALLOC_HUGE_FIRST)
        || aclrtMalloc(&w->c, N * sizeof(float), ACL_MEM_MALLOC_HUGE_FIRST))
        return NULL;
    w->one = 1.0f;
    w->alpha = aclCreateScalar(&w->one, ACL_FLOAT);
    w->ta = tensor(w->a, 1, N);
    w->tb = tensor(w->b, 1, N);
    w->tc = tensor(w->c, 1, N);
    w->ma = tensor(w->a, 4, 4);
    w->mb = tensor(w->b, 4, 4);
    w->mc = tensor(w->c, 4, 4);
    if (HcclCommInitAll(2, devices, w->comms)) return NULL;
    return w;
}

aclrtStream scenario_stream(ScenarioWork *w) { return w->stream; }

int scenario_steps(ScenarioWork *w, int steps)
{
    float host[N];
    for (int i = 0; i < N; i++) host[i] = (float)i;
    for (int s = 0; s < steps; s++) {
        uint64_t ws = 0;
        aclOpExecutor *ex = NULL;
        if (aclrtMemcpy(w->a, sizeof host, host, sizeof host, ACL_MEMCPY_HOST_TO_DEVICE)) return 1;
        if (aclrtMemcpy(w->b, sizeof host, host, sizeof host, ACL_MEMCPY_HOST_TO_DEVICE)) return 2;
        if (aclnnAddGetWorkspaceSize(w->ta, w->tb, w->alpha, w->tc, &ws, &ex)) return 3;
        if (aclnnAdd(NULL, ws, ex, w->stream)) return 4;
        if (aclnnMatmulGetWorkspaceSize(w->ma, w->mb, w->mc, 0, &ws, &ex)) return 5;
        if (aclnnMatmul(NULL, ws, ex, w->stream)) return 6;
        if (HcclAllReduce(w->c, w->c, N, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, w->comms[0], w->stream)) return 7;
        if (HcclBroadcast(w->c, N, HCCL_DATA_TYPE_FP32, 0, w->comms[0], w->stream)) return 8;
        if (s % 2 == 0 && HcclBarrier(w->comms[0], w->stream)) return 9;
        if (aclrtSynchronizeStream(w->stream)) return 10;
        if (aclrtMemcpy(host, sizeof host, w->c, sizeof host, ACL_MEMCPY_DEVICE_TO_HOST)) return 11;
    }
    return 0;
}

int scenario_close(ScenarioWork *w)
{
    int rc = HcclCommDestroy(w->comms[0]) | HcclCommDestroy(w->comms[1]);
    aclDestroyTensor(w->ta);
    aclDestroyTensor(w->tb);
    aclDestroyTensor(w->tc);
    aclDestroyTensor(w->ma);
    aclDestroyTensor(w->mb);
    aclDestroyTensor(w->mc);
    aclDestroyScalar(w->alpha);
    rc |= aclrtFree(w->a) | aclrtFree(w->b) | aclrtFree(w->c);
    rc |= aclrtDestroyStream(w->stream) | aclrtResetDevice(0);
    free(w);
    return rc;
}
