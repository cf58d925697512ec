"""Parsers of compiler output and architecture names (no nvcc needed)."""

from __future__ import annotations

import pytest

from cubridge.build import (
    UnsupportedArchError,
    arch_for_capability,
    check_supported,
    gencode_flag,
    parse_arch,
    parse_diagnostics,
    parse_ptxas_report,
)

PTXAS_LOG = """\
ptxas info    : 0 bytes gmem, 28 bytes cmem[3]
ptxas info    : Compiling entry function 'fa_fwd' for 'sm_90a'
ptxas info    : Function properties for fa_fwd
    112 bytes stack frame, 108 bytes spill stores, 96 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 112 bytes cumulative stack size
ptxas info    : Function properties for helper
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Compiling entry function '_Z5smallPf' for 'sm_80'
ptxas info    : Function properties for _Z5smallPf
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 12 registers, 4096 bytes smem, 360 bytes cmem[0]
"""


def test_ptxas_report_reads_registers_smem_and_spills():
    report = parse_ptxas_report(PTXAS_LOG)
    assert set(report) == {"fa_fwd", "_Z5smallPf"}
    fa = report["fa_fwd"]
    assert (fa.arch, fa.registers, fa.barriers) == ("sm_90a", 255, 1)
    assert (fa.stack_frame_bytes, fa.spill_store_bytes, fa.spill_load_bytes) == (112, 108, 96)
    assert fa.spills
    small = report["_Z5smallPf"]
    assert (small.arch, small.registers, small.smem_bytes, small.spills) == ("sm_80", 12, 4096,
                                                                             False)


def test_spills_of_non_inlined_callees_count_for_the_entries_of_their_arch():
    log = PTXAS_LOG.replace(
        "ptxas info    : Function properties for helper\n"
        "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n",
        "ptxas info    : Function properties for helper\n"
        "    0 bytes stack frame, 64 bytes spill stores, 108 bytes spill loads\n"
        "ptxas info    : Function properties for other\n"
        "    0 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\n")
    report = parse_ptxas_report(log)
    fa, small = report["fa_fwd"], report["_Z5smallPf"]
    assert (fa.spill_store_bytes, fa.spill_load_bytes) == (108, 96)  # its own line
    assert fa.callee_spill_bytes == 180 and fa.spill_bytes == 108 + 96 + 180
    assert small.callee_spill_bytes == 0 and not small.spills  # (another arch's callees)
    clean = parse_ptxas_report(PTXAS_LOG)["_Z5smallPf"]
    assert type(clean).from_json({k: v for k, v in clean.to_json().items()
                                  if k != "callee_spill_bytes"}) == clean  # older records


def test_ptxas_report_without_spill_line_fails_loudly():
    broken = "ptxas info    : Compiling entry function 'k' for 'sm_80'\n" \
             "ptxas info    : Used 10 registers\n"
    with pytest.raises(ValueError, match="no stack/spill line"):
        parse_ptxas_report(broken)


def test_diagnostics_give_file_line_and_message():
    log = (
        "/tmp/x/kernel.cu(12): error: identifier \"foo\" is undefined\n"
        "  int a = foo;\n"
        "/tmp/x/hooks.cuh(3): warning #177-D: variable \"b\" was declared but never referenced\n"
        "ptxas fatal   : Unresolved extern function 'bar'\n"
    )
    assert parse_diagnostics(log) == [
        ("/tmp/x/kernel.cu", 12, "error", 'identifier "foo" is undefined'),
        ("/tmp/x/hooks.cuh", 3, "warning", 'variable "b" was declared but never referenced'),
        ("ptxas", 0, "error", "Unresolved extern function 'bar'"),
    ]


def test_arch_names():
    assert parse_arch("sm_90a") == (9, 0, "a")
    assert parse_arch("sm_80") == (8, 0, "")
    assert gencode_flag("sm_90a") == "-gencode=arch=compute_90a,code=sm_90a"
    assert arch_for_capability(9, 0) == "sm_90a"
    assert arch_for_capability(8, 6) == "sm_86"
    with pytest.raises(UnsupportedArchError, match="not of the form"):
        parse_arch("hopper")
    with pytest.raises(UnsupportedArchError, match="needs sm_80 or newer; this device is sm_75"):
        check_supported("sm_75", "sm_80", "kernel x")
    check_supported("sm_90a", "sm_80", "kernel x")


def test_cli_registers_build_and_kernels(capsys):
    from cubridge.cli import main

    assert main(["kernels"]) == 0
    out = capsys.readouterr().out
    assert "fa_sm80" in out and "head dims 64, 96, 128, 256 (QK = V), multiples of 8" in out
    assert "on the next wider build; QK/V 192/128" in out
    assert "D192/128: block_m 128, block_n 128, stages 2, q_buffers 1" in out
    assert main(["build", "not_a_kernel"]) == 2
    assert "no kernel 'not_a_kernel' in the library" in capsys.readouterr().err
    # a QK/V pair the entry does not build is refused before nvcc
    assert main(["build", "fa_sm80", "--head-dim", "192/128", "--arch", "sm_90a"]) == 2
    assert ("fa_sm80 does not build head dims 192/128 (it builds 64, 128, 256 (QK = V), "
            "multiples of 8 from 8 to 256 on the next wider build)"
            in capsys.readouterr().err)
    with pytest.raises(SystemExit):
        main(["build", "fa_sm90", "--head-dim", "192x128"])
    assert "an int, or QK/V such as 192/128" in capsys.readouterr().err
