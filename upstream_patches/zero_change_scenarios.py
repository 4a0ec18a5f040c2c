"""Observable behaviour of Triton's autotuner when no backend hook is used.

`upstream_patches/check` runs this script twice, against the unpatched copy of the installed Triton and against the
patched one, and requires identical output: the patches must not change anything for a driver that defines no
`get_autotune_hooks()` and is never switched. It needs no GPU: the driver, the backend and the kernels are mocks, and
kernels are never compiled.

Prints one JSON document: per scenario, the launches, tuning keys, cache contents, timings, listener calls, and what
the disk cache holds.
"""

import json
import os
import sys
import tempfile

import triton
import triton.language as tl
from triton import knobs
from triton.backends import Backend, backends
from triton.backends.compiler import GPUTarget
from triton.runtime.driver import driver
from triton.runtime.errors import OutOfResources

TIMINGS = {16: 4.0, 32: 3.0, 64: 1.0, 128: 2.0, 256: 5.0}


def configs(*block_sizes, **kwargs):
    return [triton.Config(kwargs={'BLOCK_SIZE': b}, **kwargs) for b in block_sizes]


@triton.jit
def _kernel(x, N, BLOCK_SIZE: tl.constexpr):
    pass


class Buffer:
    """Enough of a tensor for the autotuner: a dtype, and zero_/clone/copy_ for reset_to_zero/restore_value."""

    def __init__(self, dtype='fp32'):
        self.dtype = dtype
        self.events = []

    def zero_(self):
        self.events.append('zero_')

    def clone(self):
        self.events.append('clone')
        return self

    def copy_(self, other):
        self.events.append('copy_')


class Kernel:
    """Wraps a JITFunction like `triton.heuristics` does; records launches instead of compiling."""

    arg_names = ['x', 'N']

    def __init__(self, log, fail=()):
        self.fn = _kernel
        self.log = log
        self.fail = fail

    def run(self, *args, **kwargs):
        self.log.append(('run', kwargs['BLOCK_SIZE'], sorted(k for k in kwargs if k != 'BLOCK_SIZE')))
        if kwargs['BLOCK_SIZE'] in self.fail:
            raise OutOfResources(1, 0, 'shared memory')

    def warmup(self, *args, **kwargs):
        self.log.append(('warmup', kwargs['BLOCK_SIZE']))
        return kwargs['BLOCK_SIZE']


class MockBackend:

    def __init__(self, target):
        self.target = target

    @staticmethod
    def supports_target(target):
        return target.backend == 'zero-change-mock'

    def hash(self):
        return 'zero-change-mock'


class MockDriver:
    """A driver without `get_autotune_hooks`: the default benchmarker is the driver's."""

    def __init__(self, log):
        self.log = log

    @staticmethod
    def is_active():
        return False

    def get_current_target(self):
        return GPUTarget('zero-change-mock', 0, 32)

    def get_benchmarker(self):

        def do_bench(kernel_call, quantiles):
            kernel_call()
            block_size = self.log[-1][1]
            self.log.append(('bench', block_size, list(quantiles)))
            return [TIMINGS[block_size]] * 3

        return do_bench


def describe(tuner):
    return {
        'cache': sorted([list(map(str, k)), str(v)] for k, v in tuner.cache.items()),
        'configs_timings': [[str(c), t] for c, t in getattr(tuner, 'configs_timings', {}).items()],
        'best_config': str(getattr(tuner, 'best_config', None)),
    }


def scenario(name, results, mock_driver=True):

    def register(fn):
        log, listened = [], []
        # Without the mock, the default driver is active: none on a host without GPU.
        driver.set_active(MockDriver(log) if mock_driver else None)
        knobs.autotuning.listener = lambda **kw: listened.append({
            'key': list(map(str, kw['key'])), 'best_config': str(kw['best_config']), 'cache_hit': kw['cache_hit'],
            'configs_timings': [[str(c), t] for c, t in kw['configs_timings'].items()]
        })
        try:
            out = fn(log)
        finally:
            knobs.autotuning.listener = None
        results[name] = {'log': log, 'listener': listened, **out}
        return fn

    return register


def main():
    results = {}
    cache_dir = tempfile.mkdtemp(prefix='zero-change-cache-')
    os.environ['TRITON_CACHE_DIR'] = cache_dir
    backends['zero-change-mock'] = Backend(compiler=MockBackend, driver=MockDriver)

    @scenario('basic', results)
    def _(log):
        tuner = triton.autotune(configs=configs(32, 64, 128), key=['N'])(Kernel(log))
        x = Buffer()
        for n in (1024, 1024, 2048, 1024):
            tuner.run(x, n)
        tuner.run(Buffer('fp16'), 1024)
        tuner.run(x, N=4096)
        return describe(tuner)

    @scenario('user_do_bench_and_kwargs', results)
    def _(log):

        def do_bench(kernel_call, quantiles):
            kernel_call()
            return [TIMINGS[log[-1][1]] * 2] * 3

        tuner = triton.autotune(configs=configs(32, 64), key=['N'], do_bench=do_bench)(Kernel(log))
        tuner.run(Buffer(), 1024, extra=1)
        return describe(tuner)

    @scenario('default_driver', results, mock_driver=False)
    def _(log):

        def do_bench(kernel_call, quantiles):
            kernel_call()
            return [TIMINGS[log[-1][1]]] * 3

        tuner = triton.autotune(configs=configs(32, 64, 128), key=['N'], do_bench=do_bench)(Kernel(log))
        tuner.run(Buffer(), 1024)
        tuner.run(Buffer(), 1024)
        return describe(tuner)

    @scenario('user_pruning', results)
    def _(log):
        seen = []

        def early_config_prune(cfgs, named_args, **kwargs):
            seen.append(['prune', [str(c) for c in cfgs], sorted(named_args), sorted(kwargs)])
            return cfgs[1:]

        def perf_model(**kwargs):
            seen.append(['model', kwargs['BLOCK_SIZE']])
            return -kwargs['BLOCK_SIZE']

        prune = {'early_config_prune': early_config_prune, 'perf_model': perf_model, 'top_k': 2}
        tuner = triton.autotune(configs=configs(16, 32, 64, 128), key=['N'], prune_configs_by=prune)(Kernel(log))
        tuner.run(Buffer(), 1024)
        tuner.run(Buffer(), 1024)
        warm = tuner.warmup(Buffer(), 1024)
        return {**describe(tuner), 'seen': seen, 'warmup': warm}

    @scenario('single_config_and_single_survivor', results)
    def _(log):
        single = triton.autotune(configs=configs(64), key=['N'])(Kernel(log))
        single.run(Buffer(), 1024)
        prune = {'early_config_prune': lambda cfgs, named_args, **kwargs: cfgs[-1:]}
        survivor = triton.autotune(configs=configs(32, 64), key=['N'], prune_configs_by=prune)(Kernel(log))
        survivor.run(Buffer(), 1024)
        return {'single': describe(single), 'survivor': describe(survivor)}

    @scenario('hooks_reset_restore_and_failures', results)
    def _(log):
        x = Buffer()
        tuner = triton.autotune(configs=configs(32, 64, 128), key=['N'], reset_to_zero=['x'],
                                restore_value=['x'])(Kernel(log, fail=(64, )))
        tuner.run(x, 1024)
        tuner.run(x, 1024)
        events = []

        def pre_hook(kwargs, reset_only=False):
            events.append(['pre', reset_only])

        def post_hook(kwargs, exception):
            events.append(['post', exception is None])

        hooked = triton.autotune(configs=configs(32, 64), key=['N'], pre_hook=pre_hook, post_hook=post_hook)
        hooked = hooked(Kernel(log))
        hooked.run(Buffer(), 1024)
        return {**describe(tuner), 'x': x.events, 'events': events, 'hooked': describe(hooked)}

    @scenario('prepopulated_cache', results)
    def _(log):
        tuner = triton.autotune(configs=configs(32, 64), key=['N'])(Kernel(log))
        tuner.cache[(1024, 'fp32')] = configs(32)[0]
        tuner.run(Buffer(), 1024)
        tuner.run(Buffer(), 2048)
        return describe(tuner)

    @scenario('disk_cache', results)
    def _(log):
        out = {}
        for attempt in ('first', 'second'):
            tuner = triton.autotune(configs=configs(32, 64, 128), key=['N'], cache_results=True)(Kernel(log))
            tuner.run(Buffer(), 1024)
            out[attempt] = describe(tuner)
        with_pre_hook = configs(32, 64, pre_hook=lambda kw: log.append(('config_pre_hook', )))
        tuner = triton.autotune(configs=with_pre_hook, key=['N'], cache_results=True)(Kernel(log))
        tuner.run(Buffer(), 1024)
        stored = []
        for root, _, files in os.walk(cache_dir):
            for f in files:
                if f.endswith('.autotune.json'):
                    with open(os.path.join(root, f)) as fh:
                        stored.append(json.load(fh))
        out['stored'] = sorted(json.dumps(s, sort_keys=True) for s in stored)
        return out

    json.dump({'triton': os.path.dirname(triton.__file__), 'results': results}, sys.stdout, indent=1, sort_keys=True)
    print()


if __name__ == '__main__':
    main()
