/* The simulated libnnopbase.so: aclnn's tensor and scalar objects (aclnn/acl_meta.h). */
#include <stdlib.h>
#include <string.h>

#include "sim_tensor.h"

aclTensor *aclCreateTensor(const int64_t *viewDims, uint64_t viewDimsNum, aclDataType dataType,
                           const int64_t *stride, int64_t offset, aclFormat format, const int64_t *storageDims,
                           uint64_t storageDimsNum, void *tensorData)
{
    (void)format;
    (void)storageDims;
    (void)storageDimsNum;
    if (viewDimsNum > SIM_MAX_DIMS || (viewDimsNum > 0 && viewDims == NULL)) {
        return NULL;
    }
    aclTensor *t = calloc(1, sizeof *t);
    if (t == NULL) {
        return NULL;
    }
    t->dataType = dataType;
    t->dims = viewDimsNum;
    memcpy(t->shape, viewDims, viewDimsNum * sizeof(int64_t));
    if (stride != NULL) {
        memcpy(t->stride, stride, viewDimsNum * sizeof(int64_t));
    }
    t->offset = offset;
    t->data = tensorData;
    return t;
}

aclnnStatus aclDestroyTensor(const aclTensor *tensor)
{
    free((void *)tensor);
    return 0;
}

aclScalar *aclCreateScalar(void *value, aclDataType dataType)
{
    if (value == NULL) {
        return NULL;
    }
    aclScalar *s = calloc(1, sizeof *s);
    if (s == NULL) {
        return NULL;
    }
    s->dataType = dataType;
    switch (dataType) {
        case ACL_FLOAT: s->value = *(const float *)value; break;
        case ACL_DOUBLE: s->value = *(const double *)value; break;
        case ACL_INT32: s->value = *(const int32_t *)value; break;
        case ACL_INT64: s->value = (double)*(const int64_t *)value; break;
        default: s->value = 1.0; break;
    }
    return s;
}

aclnnStatus aclDestroyScalar(const aclScalar *scalar)
{
    free((void *)scalar);
    return 0;
}
