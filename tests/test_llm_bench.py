"""The LLM benchmark's helpers (triton_nmp/llm/bench.py) that do not need a model run."""

from triton_nmp.llm.bench import tile_timing_saver


class _Choice:
    def __init__(self, log_info):
        self.log_info = log_info


def test_tile_timing_saver_keys_by_tile_and_ignores_inductors_extra_arguments():
    # torch 2.13 calls feedback savers with six positional arguments (the sixth: precompile times);
    # they must not replace the dict the timings go to.
    timings: dict = {}
    saver = tile_timing_saver(timings)
    a = _Choice({"tile_shape": "(16, 64, 32)", "num_stages": 2})
    b = _Choice({"tile_shape": "(64, 32, 128)", "num_stages": 3})
    unknown = _Choice({"backend": "extern"})
    saver({a: 0.5, b: 0.25, unknown: 0.1}, "mm", [], [a, b, unknown], lambda: {}, {a: 0.0})
    assert timings == {(16, 32, 64, 2): 0.5, (64, 128, 32, 3): 0.25}
