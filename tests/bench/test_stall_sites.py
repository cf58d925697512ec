"""bench/kernels/fa_sm90/stall_sites.py: ncu's stall samples put to CUDA call sites."""

from __future__ import annotations

import pytest
from fa_sm90_scripts import load_fa_sm90_script

# nvdisasm -c -gi as it prints a kernel: a chain of locations before each instruction
# whose location changes (innermost first; the kernel's own line last)
DISASSEMBLY = """\
fa_sm90_fwd:
\t//## File "/k/fa_sm90.cu", line 9
        /*0000*/                   S2R R0, SR_TID.X ;
\t//## File "/k/sm90_primitives.cuh", line 49 inlined at "/k/fa_sm90.cu", line 4
\t//## File "/k/fa_sm90.cu", line 4 inlined at "/k/fa_sm90.cu", line 9
\t//## File "/k/fa_sm90.cu", line 9
        /*0010*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [R1], R2 ;
        /*0020*/               @!P0 BRA `(.L_x_1) ;
\t//## File "/k/fa_sm90.cu", line 6 inlined at "/k/fa_sm90.cu", line 10
\t//## File "/k/fa_sm90.cu", line 10
        /*0030*/                   MUFU.EX2 R4, R4 ;
"""
SOURCE = """\
// 1
void producer(int lane) {          // 2
  int x;                           // 3
  mbar_wait(&k_empty, 0);          // 4
void consumer(int c) {             // 5
  p = exp2(s);                     // 6
// 7
// 8
  if (threadIdx.x < 32) producer(P, sh, threadIdx.x);
  consumer(P, sh, warpgroup - 1);
"""
SASS_CSV = '''"Kernel Name","fa_sm90_fwd",
"Address","Source","Warp Stall Sampling (All Samples)","Instructions Executed"
"0x7f0000000100","S2R R0, SR_TID.X","1","10"
"0x7f0000000110","SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [R1], R2","70","10"
"0x7f0000000120","@!P0 BRA `(.L_x_1)","10","10"
"0x7f0000000130","MUFU.EX2 R4, R4","1,019","10"
'''


@pytest.fixture(scope="module")
def sites():
    return load_fa_sm90_script("stall_sites")


def test_each_instruction_gets_its_kernel_lines_innermost_first(sites):
    chains = sites.inline_chains(DISASSEMBLY, "fa_sm90.cu")
    assert chains == {0x0: [9], 0x10: [4, 9], 0x20: [4, 9], 0x30: [6, 10]}


def test_samples_are_read_by_offset_with_thousands_separators(sites):
    assert sites.stall_samples(SASS_CSV) == [(0x0, 1), (0x10, 70), (0x20, 10), (0x30, 1019)]
    with pytest.raises(ValueError, match="SourceCounters"):
        sites.stall_samples('"Address","Source","Instructions Executed"\n"0x0","NOP","1"\n')
    with pytest.raises(ValueError, match="SASS source page"):
        sites.stall_samples('"ID","Metric Name"\n"0","dram__bytes"\n')


def test_samples_land_on_call_sites_and_roles(sites):
    chains = sites.inline_chains(DISASSEMBLY, "fa_sm90.cu")
    roles = sites.role_lines(SOURCE)
    assert roles == {"producer": 9, "consumer": 10}
    by_site, by_role, total = sites.attribute(chains, sites.stall_samples(SASS_CSV), roles)
    assert total == 1100
    assert by_site["producer", 4, 9] == 80  # the wait and its retry branch
    assert by_site["consumer", 6, 10] == 1019
    assert by_role == {"consumer": 1019, "producer": 81}
    text = sites.report(by_site, by_role, total, SOURCE, top=2)
    assert "| 92.64% | consumer | 6: `p = exp2(s);                     // 6` |" in text
    assert "4: `mbar_wait(&k_empty, 0);          // 4`" in text


def test_a_csv_without_samples_exits_with_what_to_profile(sites, tmp_path):
    csv_path = tmp_path / "sass.csv"
    csv_path.write_text('"Address","Source","Instructions Executed"\n"0x0","NOP","1"\n')
    fake_nvdisasm = tmp_path / "nvdisasm"
    fake_nvdisasm.write_text("#!/bin/sh\necho '        /*0000*/                   NOP ;'\n")
    fake_nvdisasm.chmod(0o755)
    with pytest.raises(SystemExit, match="SourceCounters"):
        sites.main([str(csv_path), "--cubin", str(csv_path), "--nvdisasm", str(fake_nvdisasm)])
