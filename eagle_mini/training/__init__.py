"""Training draft heads (EAGLE §3.1, §4.1): the data, the target's features, the loss and trainer.

Read in this order: `eagle_mini/data.py` (ShareGPT conversations and their loss masks, MT-bench),
`features` (the target's features, dumped resumably or streamed), `regenerate` (ShareGPT's user
turns with the target's own replies), `train` (the EAGLE-1 loss, noise, the trainer on
`accelerate`), `commands` (`train-head` end to end and the model card).
"""
