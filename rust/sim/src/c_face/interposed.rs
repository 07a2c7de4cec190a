//! The ACL runtime and HCCL functions MSPTI interposes (`aclrtMalloc`, `HcclAllReduce`, ...):
//! preloaded, a program's calls bind to these, and each calls its wrapper in the model
//! (`model::interpose`), which fires the callbacks around the real function.

use std::ffi::c_int;

use crate::model::interpose::{self, interposed_functions, CPtr, Ptr, Stream};

/// The export of one function of `interposed_functions`, with its C signature.
macro_rules! export {
    ($lib:expr, $missing:expr, fn $name:ident($($a:ident : $t:ty),* $(,)?), spec = $spec:expr, stream = $stream:expr) => {
        /// Interposed: fires MSPTI's callbacks and records around the real function.
        ///
        /// # Safety
        /// The C contract of the real function of that name.
        #[no_mangle]
        pub unsafe extern "C" fn $name($($a: $t),*) -> c_int {
            // SAFETY: the caller's arguments, under the same C contract.
            unsafe { interpose::$name($($a),*) }
        }
    };
}

interposed_functions!(export);
