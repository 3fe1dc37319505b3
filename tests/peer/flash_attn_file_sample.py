"""A pytest plugin for running FlashAttention 2.8's own tests/test_flash_attn.py, unmodified,
against flashattn's compat package (scripts/device-dropin-check loads it with
`-p flash_attn_file_sample`; the peer file itself is never committed here).

It does three things and no more:
  * Deselects the dropout cases (dropout_p > 0) of the four tests that decode FlashAttention-2's
    internal dropout-mask layout: test_flash_attn_qkvpacked, test_flash_attn_varlen_qkvpacked,
    test_flash_attn_output and test_flash_attn_varlen_output pass return_attn_probs=True and
    turn S_dmask into probabilities with convert_flash_attn_S_to_softmax and
    normalize_flash_attn_S, which assume FA2's encoding: P normalized block by block by a
    running maximum over _get_block_size_n(...) keys, the kernel's tile width. flashattn
    returns the exact probabilities (dropped elements negated), which that decoding turns into
    wrong ones, and has no such block size. flashattn's dropout itself is tested against the
    shared Philox keep-test (tests/python/test_dropout.py, the C++ dropout suites).
  * Keeps a fixed sample of the rest: --fa-sample N/K runs the cases whose crc32(name) % N ==
    K, the same cases on every run; K = 0..N-1 over N calls cover the whole file.
  * Runs the dropout cases of test_flash_attn_race_condition last: each makes 251 calls with
    return_attn_probs=True, whose probabilities flashattn materializes on the host (slow at
    batch 60 x 1024 x 1024), so a run with a time limit finishes the others first.
  * Counts outcomes per test function (printed at the end, and each case's outcome appended
    to --fa-report as a JSON line as soon as it is known, so a run cut short by a time limit
    still leaves its counts).
"""
import collections
import json
import zlib

import pytest

DROPOUT_LAYOUT_TESTS = ("test_flash_attn_qkvpacked", "test_flash_attn_varlen_qkvpacked",
                        "test_flash_attn_output", "test_flash_attn_varlen_output")

_outcomes = collections.defaultdict(collections.Counter)
_report_path = None
_deselected = collections.Counter()


def pytest_addoption(parser):
    group = parser.getgroup("flash_attn_file_sample")
    group.addoption("--fa-sample", default="1/0",
                    help="N/K: run the cases whose crc32(test name) %% N == K (default 1/0: all)")
    group.addoption("--fa-report", default=None,
                    help="append each case's outcome to this file as a JSON line")


def _sample(config):
    modulus, residue = (int(x) for x in config.getoption("--fa-sample").split("/"))
    if modulus < 1 or not 0 <= residue < modulus:
        raise ValueError(f"--fa-sample: expected N/K with 0 <= K < N, got "
                         f"{config.getoption('--fa-sample')}")
    return modulus, residue


def _function(item):
    return getattr(item, "originalname", None) or item.name.split("[")[0]


def _reads_dropout_layout(item):
    params = getattr(item, "callspec", None)
    dropout_p = params.params.get("dropout_p", 0.0) if params is not None else 0.0
    return _function(item) in DROPOUT_LAYOUT_TESTS and dropout_p > 0


def _in_sample(config, name):
    modulus, residue = _sample(config)
    return zlib.crc32(name.encode()) % modulus == residue


@pytest.hookimpl(trylast=True)
def pytest_generate_tests(metafunc):
    """Drops the parameter sets outside the sample before pytest makes test items of them:
    the file has about 509,000 cases, and making all of them takes minutes. (metafunc._calls
    is pytest's list of parameter sets; where a pytest version has none, the same cases are
    deselected after collection instead, only more slowly.) One set is kept when none is in
    the sample, for pytest would otherwise make an item without parameters; it is deselected
    below."""
    calls = getattr(metafunc, "_calls", None)
    if not calls:
        return
    name = metafunc.function.__name__
    kept = [call for call in calls if _in_sample(metafunc.config, f"{name}[{call.id}]")]
    _deselected["outside the sample"] += len(calls) - len(kept)
    metafunc._calls = kept or calls[:1]
    if not kept:
        _deselected["outside the sample"] -= 1


def pytest_configure(config):
    global _report_path
    _report_path = config.getoption("--fa-report")


def pytest_collection_modifyitems(config, items):
    selected, deselected = [], []
    for item in items:
        in_sample = _in_sample(config, item.name)
        if in_sample and _reads_dropout_layout(item):
            _deselected["dropout-layout case in the sample: " + _function(item)] += 1
            deselected.append(item)
        elif in_sample:
            selected.append(item)
        else:
            _deselected["outside the sample"] += 1
            deselected.append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
    items[:] = sorted(selected, key=_runs_last)  # stable: file order otherwise


def _runs_last(item):
    params = getattr(item, "callspec", None)
    dropout_p = params.params.get("dropout_p", 0.0) if params is not None else 0.0
    return _function(item) == "test_flash_attn_race_condition" and dropout_p > 0


def _record(report, outcome):
    function = report.nodeid.split("::")[-1].split("[")[0]
    _outcomes[function][outcome] += 1
    if _report_path:
        line = {"test": report.nodeid.split("::")[-1], "outcome": outcome,
                "seconds": round(report.duration, 3)}
        if report.failed:
            line["error"] = (str(report.longrepr).strip().splitlines() or [""])[-1][:500]
        with open(_report_path, "a") as out:
            out.write(json.dumps(line) + "\n")


def pytest_runtest_logreport(report):
    if report.when == "call":
        _record(report, report.outcome)
    elif report.outcome == "skipped":  # skipped in setup (pytest.skip() at the top, marks)
        _record(report, "skipped")
    elif report.failed:
        _record(report, "error")


def pytest_terminal_summary(terminalreporter):
    write = terminalreporter.write_line
    write("")
    write("FlashAttention 2.8 tests/test_flash_attn.py against flashattn, per test function:")
    write(f"{'function':40s} {'passed':>7s} {'failed':>7s} {'error':>7s} {'skipped':>8s}")
    totals = collections.Counter()
    for function in sorted(_outcomes):
        counts = _outcomes[function]
        totals.update(counts)
        write(f"{function:40s} {counts['passed']:7d} {counts['failed']:7d} "
              f"{counts['error']:7d} {counts['skipped']:8d}")
    write(f"{'total':40s} {totals['passed']:7d} {totals['failed']:7d} {totals['error']:7d} "
          f"{totals['skipped']:8d}")
    for reason, count in sorted(_deselected.items()):
        write(f"deselected ({reason}): {count}")
