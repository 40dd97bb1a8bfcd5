"""The runtime (layer 3): what changes how decoding runs on the machine at hand, never what it
outputs.

`run` (a method from the table in `eagle_mini/methods.py`, run by name, "auto" resolved here),
`cost` (the target's cost curve c(n)/c(1), measured), `auto` (EAGLE-2's tree sized for this
machine from that curve), `exact` (batch-invariant verification: every tree node's logits
bit-identical to vanilla's one-token step), `packed` (prepacked CPU weights), `kernels` (packed or
stock, chosen by measurement) and `precision` (bf16 units and matmul precision).
"""
