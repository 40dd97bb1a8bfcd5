"""The papers' experiments (layer 6), each a command and a results file.

`uncertainty` and `ablation` (EAGLE §3.1's feature-uncertainty ablation, `experiment
uncertainty`), `acceptance` (`measure-acceptance`: per-prompt tau and acceptance by depth) and
`claims` (`paper-vs-ours`: the papers' claims against ours, one table).
"""
