"""LLMs on nmp: GPT-2 small and a Llama-shaped decoder compiled with `torch.compile(backend="nmp")`; the same as
`triton-nmp llm` (see `triton_nmp/llm/bench.py` for what is measured and how).

    python benchmarks/llm.py                                   # gpt2 + llama, fp16, default and max-autotune
    python benchmarks/llm.py --models gpt2 --modes default --plot llm_breakdown.png
"""

import sys

from triton_nmp.llm.bench import main

if __name__ == "__main__":
    sys.exit(main())
