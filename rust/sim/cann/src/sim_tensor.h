/* The simulated aclTensor and aclScalar, shared by libnnopbase.so (which creates them) and
 * libopapi.so (whose operators read them). Device memory is host memory in the simulated tree,
 * so operators compute their real results. */
#ifndef SIM_TENSOR_H_
#define SIM_TENSOR_H_

#include <stdint.h>
#include "aclnn/acl_meta.h"

#define SIM_MAX_DIMS 8

struct aclTensor {
    aclDataType dataType;
    uint64_t dims;
    int64_t shape[SIM_MAX_DIMS];
    int64_t stride[SIM_MAX_DIMS];
    int64_t offset;
    void *data;
};

struct aclScalar {
    aclDataType dataType;
    double value;
};

/* Elements of a tensor's view. */
static inline int64_t simTensorNumel(const aclTensor *t)
{
    int64_t n = 1;
    for (uint64_t i = 0; i < t->dims; i++) {
        n *= t->shape[i];
    }
    return n;
}

#endif
