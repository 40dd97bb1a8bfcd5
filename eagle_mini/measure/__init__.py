"""Measurement (layer 5): how good a head is and how fast a method runs, side by side.

`evaluate` (`eval-head`: top-1, n-alpha, pooled tau), `lossless` (`check-lossless`: every EAGLE
method's text against vanilla's), `bench` (EAGLE against its peers, every method on one clock),
`profile` (`profile-target --by-op`: where a forward's time goes), `intervals` (bootstrap
intervals over prompts or conversations) and `load` (was the machine busy while a command timed?). What changes how decoding runs lives in
`eagle_mini.runtime`; the papers' experiments in `eagle_mini.experiments`.
"""
