"""Tests only: ``python -m sglang.launch_server`` with SGLang's CPU rule for speculative decoding
(``speculative_hook._disable_overlap_schedule_for_cpu``) bypassed, so a CPU NGRAM server keeps overlap
scheduling. Not part of the plugin; SSR itself has ``SSR_TEST_FORCE_OVERLAP_CPU=1`` for this."""
import runpy
import sys

from sglang.srt.arg_groups import speculative_hook

speculative_hook._disable_overlap_schedule_for_cpu = lambda server_args: None
sys.argv[0] = "sglang.launch_server"
runpy.run_module("sglang.launch_server", run_name="__main__", alter_sys=True)
