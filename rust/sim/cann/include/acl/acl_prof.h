/* AscendCL's profiling header (acl/acl_prof.h). The simulated CANN tree has no msprof: this
 * header exists so programs that include it build; it declares nothing beyond acl_base.h.
 * Part of mspti-lens's simulated CANN tree (docs/simulated_cann.md). */
#ifndef SIM_ACL_PROF_H_
#define SIM_ACL_PROF_H_

#include "acl_base.h"

#endif
