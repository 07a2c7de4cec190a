"""mspti-lens's interpreter-start hook, put first on PYTHONPATH by ``python -m mspti_lens record``.

It runs any sitecustomize this one shadows, then starts recording if (and only if) mspti-lens's
variable is set. Nothing here may break the program it rides in.
"""

import os
import sys


def _chain() -> None:
    # The sitecustomize this directory shadows (a distribution's or a virtualenv's), run as usual.
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


try:
    _chain()
except Exception as e:  # noqa: BLE001 - the program must run whatever the hook does
    print(
        f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{type(e).__name__}: {e}", file=sys.stderr
    )

# The variable is mspti_lens.runs.hook.RECORD_VARIABLE (checked here so that an unset one costs
# no import at all).
if os.environ.get("MSPTI_LENS_RECORD"):
    try:
        from mspti_lens.runs import hook

        hook.start()
    except Exception as e:  # noqa: BLE001 - the program must run whatever the hook does
        print(
            f"mspti-lens: not recording this process ({type(e).__name__}: {e}); it runs on", file=sys.stderr
        )
