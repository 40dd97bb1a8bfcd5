"""Repository tooling (layer 8), reached through the CLI and `make`, never by the algorithm.

`report` (`results-md`: RESULTS.md and the README's generated tables from the committed results),
`rehearsal` (`rehearse`: the 7B path end to end as a pipeline of CLI steps on a 7B-shaped model
with random weights) and `browser` (`make test-browser`: the widget notebooks in headless
Chromium).
"""
