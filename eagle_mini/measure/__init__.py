"""Measuring heads, methods and the machine; the algorithm itself lives one level up.

`methods` (decoding methods by name, "auto" resolved here), `evaluate` (`eval-head`: top-1,
n-alpha, pooled tau), `lossless` (`check-lossless`), `profile` (the cost curve c(n)/c(1)),
`bench` (EAGLE against its peers, side by side), `auto` (EAGLE-2's tree size for this machine),
`packed` (prepacked CPU weights for verification forwards), `kernels` (packed or stock, chosen
by measurement), `uncertainty` and `ablation` (the
feature-uncertainty experiment), `eagle3` (EAGLE-3's ideas for notebook 07),
`intervals` (bootstrap intervals over prompts or conversations), `acceptance`
(`measure-acceptance`: per-prompt tau and acceptance behind the papers' claims), `claims`
(`paper-vs-ours`: the papers' claims against ours, one table) and `rehearsal` (`rehearse`: the
7B path end to end on a 7B-shaped model with random weights, time and memory per step).
"""
