#!/usr/bin/env bash
# Memory-safety checks of the native code under valgrind (installed by `make system-deps`):
#
#   1. memcheck over every native Rust test binary (those `make test-rust` built: `cargo test
#      --profile test-release --no-run`): invalid reads and writes, use of uninitialised memory,
#      definite leaks (histograms and shards are leaked on purpose for the life of the process;
#      the one unit test that drops a shard is suppressed).
#   2. memcheck over a multi-threaded Python workload on the simulator, driving the extension
#      without polars (so the run stays fast): 6 threads of nested calls, enable/disable, snapshots,
#      resets, snapshot rebuilds, NULL/garbage/bad-site callbacks, 200 short-lived threads and a
#      close while threads are still inside callbacks, in three subscribe/unsubscribe rounds.
#   3. DRD (valgrind's race detector) over the shard/snapshot contention test. DRD does not model
#      atomics, so its reports are classified: on atomics (race-free by the Rust memory model), on
#      a shard's ENTER stack handed from an ended thread to the next (ordered by the shard's
#      in_use Release store / Acquire compare-exchange), inside Rust std's own synchronisation; any
#      other report in our code fails the check.
#
# Usage: scripts/memcheck.sh [OUT_DIR]   (default target/memcheck). Exit 0 when clean; the last
# line of output is a JSON summary (also in OUT_DIR/summary.json). `make memcheck` bounds its time.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${1:-target/memcheck}
PY=${PYTHON:-$ROOT/.venv/bin/python}
mkdir -p "$OUT"
command -v valgrind >/dev/null || { echo "valgrind is not installed (make system-deps)"; exit 2; }
SIM=$ROOT/python/mspti_lens/sim/libmspti_sim.so
EXT=$ROOT/python/mspti_lens/_native.abi3.so
[ -f "$SIM" ] && [ -f "$EXT" ] || { echo "build first: make dev"; exit 2; }

SUPP=$OUT/lens.supp
cat >"$SUPP" <<'EOF'
{
   shard-unit-test-drops-a-shard-whose-histograms-live-for-the-process
   Memcheck:Leak
   match-leak-kinds: definite
   ...
   fun:_ZN7_native4core5shard5Shard6insert*
   ...
   fun:_ZN7_native4core5shard5tests*
}
{
   a-bound-library-handle-lives-for-the-process-by-design-never-unloaded
   Memcheck:Leak
   match-leak-kinds: definite
   ...
   fun:_ZN7_native3ffi7symbols4bind*
}
{
   glibcs-loader-reads-whole-words-of-a-short-runpath-string-looking-for-ORIGIN-when-the-simulator-loads-the-runtime
   Memcheck:Addr8
   fun:strncmp
   fun:is_dst
   ...
   fun:_dl_map_object
}
{
   the-simulators-subscriber-objects-are-never-freed-so-a-racing-callback-can-still-read-one
   Memcheck:Leak
   match-leak-kinds: definite
   ...
   fun:msptiSubscribe
}
EOF

status=0
VG=(valgrind -q --error-exitcode=99 --num-callers=40 --suppressions="$SUPP")

# -- what runs: the native test binaries `make test-rust` built, and a Python workload ------------
mapfile -t BINS < <(cargo test --workspace --profile test-release --no-run --message-format=json 2>/dev/null |
  "$PY" -c 'import sys, json
for l in sys.stdin:
    try: m = json.loads(l)
    except ValueError: continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m.get("profile", {}).get("test"):
        print(m["executable"])')
WORK=$OUT/workload.py
cat >"$WORK" <<'EOF'
import ctypes, importlib.util, json, random, sys, threading

ext, sim_path = sys.argv[1], sys.argv[2]
spec = importlib.util.spec_from_file_location("mspti_lens._native", ext)
N = importlib.util.module_from_spec(spec)
spec.loader.exec_module(N)  # the extension alone: no polars under valgrind
S = ctypes.CDLL(sim_path)  # the same object the core dlopens: one simulator
u32, u64 = ctypes.c_uint32, ctypes.c_uint64
S.msimCallMany.argtypes, S.msimCallMany.restype = [u32, u64, u64], ctypes.c_int32
S.msimFire.argtypes = [u32, u32]
S.msimSetCounting.argtypes = [u32]
S.msimDelivered.argtypes, S.msimDelivered.restype = [u32, u32, u32], u64
S.msimInject.argtypes = [u32, u32, u32, ctypes.c_void_p, u32]
S.msimApiCount.restype = u32
apis = list(range(S.msimApiCount()))
lib = N.load_library(sim_path, sim_path)
rng = random.Random(5)
fig = {"rounds": 0, "threads": 0, "recorded": 0, "delivered": 0}

def worker(seed, stop, n):
    r = random.Random(seed)
    for _ in range(n):
        if stop.is_set():
            break
        outer = [r.choice(apis) for _ in range(r.randint(0, 3))]
        for a in outer:
            S.msimFire(a, 0)
        S.msimCallMany(r.choice(apis), 0, r.randint(1, 30))
        for a in reversed(outer):
            S.msimFire(a, 1)

def exits():
    return sum(S.msimDelivered(d, c, 1) for d in (1, 2) for c in range(64))

names = [ctypes.c_char_p(b"aclrtLaunchKernel"), None]
for rnd in range(3):
    S.msimSetCounting(1)
    s = N.NativeSession(lib)
    s.set_domain(1, True)
    s.set_domain(2, True)
    s.start("auto")
    windows = [s.reset()]
    stop = threading.Event()
    ts = [threading.Thread(target=worker, args=(rnd * 100 + i, stop, 150)) for i in range(6)]
    for t in ts:
        t.start()
    for k in range(25):
        if k % 5 == 0:
            s.set_callback(1, rng.randint(1, 36), rng.random() < 0.5)
            s.set_domain(2, rng.random() < 0.5)
        snap = s.snapshot()
        st = snap.stats([0.5, 0.99])
        b = snap.buckets()
        ks = snap.key_state()
        snap.counters()
        counters = {k2: int(v) for k2, v in snap.counters().items()}
        N.NativeSnapshot.from_state(ks["domain"], ks["cbid"], ks["name"], ks["sum"], ks["sum_sq"], ks["min"],
                                    ks["max"], ks["overflow"], b["key"], b["index"], b["count"], counters)
        if k % 4 == 0:
            windows.append(s.reset())
        for nm in names:  # NULL name, garbage fields, a bad site
            p = ctypes.cast(nm, ctypes.c_void_p) if nm is not None else None
            S.msimInject(1, 10, 0, p, 1)
            S.msimInject(1, 10, 1, p, 1)
        S.msimInject(1, 10, 7, None, 1)
    if rnd < 2:
        for t in ts:
            t.join()
    short = [threading.Thread(target=worker, args=(1000 + i, threading.Event(), 2)) for i in range(200 // 3)]
    for t in short:
        t.start()
    for t in short:
        t.join()
    if rnd < 2:
        windows.append(s.reset())
        for w in windows:
            c = w.counters()
            fig["recorded"] += sum(w.stats([])["count"])
            fig["unmatched_dropped"] = (
                fig.get("unmatched_dropped", 0) + c["unmatched"] + c["dropped"] + c["toggled"]
            )
            fig["abandoned"] = fig.get("abandoned", 0) + c["abandoned"]
        fig["delivered"] += exits()
    s.close()  # in the last round: while the workers are still inside callbacks
    stop.set()
    for t in ts:
        t.join()
    fig["rounds"] += 1
    fig["threads"] += len(ts) + len(short)
fig["health"] = N.health()
print("RESULT " + json.dumps(fig))
EOF

# -- the runs, side by side -------------------------------------------------------------------
# valgrind runs a program's threads one at a time, so each run keeps one core busy: the runs are
# independent and go MEMCHECK_JOBS at a time (default: the machine's cores), the longest first;
# their logs are read, in order, once every run has ended.
JOBS=${MEMCHECK_JOBS:-$(nproc)}
spawn() { # LOG CMD...: CMD's output in LOG, its exit status in LOG.rc
  local log=$1
  shift
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n || true; done
  ("$@" >"$log" 2>&1; echo $? >"$log.rc") &
}
plog=$OUT/memcheck-python-workload.log
PYSUPP=()
[ -f /usr/lib/valgrind/python3.supp ] && PYSUPP=(--suppressions=/usr/lib/valgrind/python3.supp)
spawn "$plog" env PYTHONMALLOC=malloc valgrind -q --num-callers=40 --leak-check=no "${PYSUPP[@]}" \
  "$PY" "$WORK" "$EXT" "$SIM"
CONT=$(printf '%s\n' "${BINS[@]}" | grep '/callback_contention-' | head -1)
dlog=$OUT/drd-callback_contention.log
spawn "$dlog" valgrind --tool=drd --num-callers=30 "$CONT" --test-threads=1
for b in "${BINS[@]}"; do
  # Timing assertions do not hold at valgrind's speed: skip them (they run in `cargo test`). A
  # forked child that _exits reports every parent allocation as its own leak: skip the fork tests.
  spawn "$OUT/memcheck-$(basename "$b").log" "${VG[@]}" --leak-check=full --errors-for-leak-kinds=definite \
    --show-leak-kinds=definite "$b" --test-threads=2 --skip tsc_and_monotonic_agree_on_a_sleep \
    --skip a_child_forked_during_snapshots --skip forked_children
done
wait

# -- 1. native tests under memcheck ------------------------------------------------------------
echo "== 1/3 memcheck: native Rust tests"
rust_tests=0
rust_errors=0
for b in "${BINS[@]}"; do
  name=$(basename "$b")
  log=$OUT/memcheck-$name.log
  if [ "$(cat "$log.rc")" = 0 ]; then
    echo "   ok   $name"
  else
    echo "   FAIL $name (see $log)"
    rust_errors=$((rust_errors + 1))
    status=1
  fi
  n=$( (grep -Eo '^test result: ok\. [0-9]+ passed' "$log" || true) | awk '{s+=$4} END {print s+0}')
  rust_tests=$((rust_tests + n))
done

# -- 2. a multi-threaded Python workload under memcheck ----------------------------------------
echo "== 2/3 memcheck: multi-threaded Python workload on the simulator"
# CPython 3.11 itself reports a few uninitialised-value errors at start-up (int.from_bytes, the
# small-int cache); count only the errors with a frame in our extension or the simulator.
pyerr=$("$PY" - "$plog" <<'EOF'
import re, sys
t = open(sys.argv[1]).read()
blocks = re.split(r"\n(?===\d+== [A-Z])", t)
errs = [b for b in blocks if re.match(r"==\d+== [A-Z]", b)]
ours = [b for b in errs if re.search(r"_native|libmspti_sim|mspti_|/rust/(lens|sim|abi)/|\.rs:\d+", b)]
print(len(ours), len(errs))
EOF
)
read -r py_ours py_all <<<"$pyerr"
exact=$(grep '^RESULT ' "$plog" | tail -1 | cut -c8- |
  "$PY" -c 'import json, sys; r = json.load(sys.stdin); low = r["recorded"] + r["unmatched_dropped"]
# every delivered EXIT is recorded, unmatched, dropped, toggled or abandoned; "abandoned" also counts ENTERs
# left open by a mid-call disable and dropped when the shard is next used, so it bounds from above
print(int(0 < low <= r["delivered"] <= low + r["abandoned"]))' 2>/dev/null || echo 0)
if [ "$exact" = 1 ] && [ "$py_ours" = 0 ]; then
  echo "   ok   python workload ($py_all errors reported, none in mspti-lens or the simulator)"
else
  echo "   FAIL python workload: $py_ours errors in our code, accounting exact: $exact (see $plog)"
  status=1
fi
pyres=$(grep '^RESULT ' "$plog" | tail -1 | cut -c8-)
[ -n "$pyres" ] || pyres='{}'

# -- 3. DRD over the shard/snapshot contention test --------------------------------------------
echo "== 3/3 drd: shard/snapshot contention"
[ "$(cat "$dlog.rc")" = 0 ] || status=1
drd=$("$PY" - "$dlog" <<'EOF'
import json, re, sys
text = open(sys.argv[1]).read()
ours = re.compile(r"\((?:shard|hist|windows|counters|callback|session|clock)\.rs:\d+\)")
# Why a report is not a data race. DRD sees neither atomics (Rust atomics are plain x86 loads and
# stores, race-free by the Rust memory model) nor Rust's std Mutex (futex-based, not pthread).
RULES = [
    ("atomic", r"sync/atomic\.rs|from_bits|Iter<core::sync::atomic"),
    # the histogram's banks and sequence word are atomics (hist.rs, seqlock.rs)
    ("atomic", r"(take_window|record|write|settle) \((hist|seqlock)\.rs"),
    # a relaxed atomic load of the shard's depth the optimiser scheduled next to RDTSC
    ("atomic", r"rdtsc \(clock\.rs"),
    # the counters are atomics too (owner-only load + store, read by snapshots)
    ("atomic", r"(add|bump|load) \(counters\.rs"),
    # the key table's slots are atomics too (the owner's lookup; passed on with the shard)
    ("atomic", r"(histogram|insert) \(shard\.rs"),
    # every shared field of the slowest-call slots is an atomic (slots and gate): the first frame outside
    # Rust's core library (atomic loads inline into bool::then and the like) is a slowest-call access
    ("atomic", r"^(==\d+==\s+(at|by) 0x[0-9A-F]+: \S+ \(library/core/[^)]*\)\n)*"
               r"==\d+==\s+(at|by) 0x[0-9A-F]+: .*(\(slowest\.rs:\d+\)|_native::core::slowest::)"),
    # a shard's ENTER stack passes to the next thread only through in_use: Release store when
    # its thread ends, Acquire compare-exchange in claim()
    ("enter_stack_handover", r"\b(enter|exit|eq) \(shard\.rs|RawKey, _native::core::shard::RawKey"),
    # the shard registry Vec, only touched under the REGISTRY Mutex (claim, all_shards)
    ("std_mutex", r"(claim|all_shards) \(shard\.rs|&_native::core::shard::Shard"),
    # a key's domain/cbid/name are written once before its histogram pointer is published with
    # Release; collect() reads them after an Acquire load of that pointer
    ("published_once", r"(collect|close_epoch) \(windows\.rs"),
    # the same for a KeyHistogram's fields (its Box pointer), read by its owner thread when
    # recording: the block is one Shard::insert made (checked on the whole report); the line table
    # names callback.rs, or shard.rs line 0 where the key table's probe is inlined into handle (or
    # handle_on<F>, the pairing of the callback subscribed with fences F)
    ("published_once", r"^\S+\s+at 0x[0-9A-F]+: handle(_on<\d+>)? \((callback\.rs|shard\.rs:0\))",
     r"new<_native::core::shard::KeyHistogram>"),
    # Rust std's own structures (the thread registry for stack-overflow reports, channels)
    ("rust_std", r"std::sys::pal::unix::stack_overflow|std::sync::mpmc|test::event"),
]
reports = re.split(r"==\d+== (?=Conflicting )", text)[1:]
kinds = {"atomic": 0, "enter_stack_handover": 0, "std_mutex": 0, "published_once": 0, "rust_std": 0,
         "unexplained": 0}
unexplained = []
for r in reports:
    frames = [ln for ln in r.splitlines() if re.match(r"==\d+==\s+(at|by) 0x", ln)]
    head = "\n".join(frames[:16])
    for kind, pat, *whole in RULES:
        if re.search(pat, head) and all(re.search(w, r) for w in whole):
            kinds[kind] += 1
            break
    else:
        if not any(ours.search(f) for f in frames):
            kinds["rust_std"] += 1  # std's own synchronisation (channels, thread registry)
        else:
            kinds["unexplained"] += 1
            unexplained.append(head)
ok = "test result: ok" in text
print(json.dumps({"conflicts": len(reports), **kinds, "test_passed": ok, "unexplained_examples": unexplained[:3]}))
EOF
)
echo "   $drd" | cut -c1-300
if ! echo "$drd" | grep -q '"unexplained": 0' || ! echo "$drd" | grep -q '"test_passed": true'; then
  echo "   FAIL drd: conflicts in our code not explained by atomics or the shard hand-over (see $dlog)"
  status=1
fi

# A run that checked no Rust test is no check.
if [ "$rust_tests" = 0 ] || [ "${#BINS[@]}" = 0 ]; then
  echo "   FAIL no Rust test ran under memcheck"
  status=1
fi

summary="{\"status\": $status, \"rust_test_binaries\": ${#BINS[@]}, \"rust_tests\": $rust_tests, \"rust_failures\": $rust_errors, \"python_workload\": $pyres, \"python_errors_ours\": ${py_ours:-0}, \"python_errors_all\": ${py_all:-0}, \"drd\": $drd}"
echo "$summary" >"$OUT/summary.json"
# RELIABILITY.md quotes the figures of a run: written where MSPTI_LENS_FIGURES points, as the tests do.
if [ -n "${MSPTI_LENS_FIGURES:-}" ]; then mkdir -p "$MSPTI_LENS_FIGURES" && cp "$OUT/summary.json" "$MSPTI_LENS_FIGURES/memcheck.json"; fi
echo "$summary"
exit $status
