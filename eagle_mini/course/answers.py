"""The reasoning behind predict-then-run answers, printed by `predictions.why` once the learner has
run the check. It states the answers, so it is the instructor's side: `make student-repo` leaves
this module out of a class's repository (`student_repo.WITHHELD`), where `why` says so instead.
"""

WHY = {
    "bigger-budget": (
        "what the 8-token tree got: expansion does not look at total_tokens, and reranking keeps "
        "the best total_tokens - 1 candidates, so the 8-token tree is part of the 32-token one and "
        "the target's greedy walk goes at least as far in it. A bigger budget never accepts less; "
        "what it costs is a bigger verification forward (notebook 00's cost curve), and notebook 06 "
        "weighs the two."),
}

# Quiz answers (`quiz.py`): question id -> (the right choice's index, why it is right).
QUIZ = {
    '00.1': (0, ('Each weight is read once per forward and used by every token in it, so until '
                 'the arithmetic catches up with the reading (n*), more tokens per forward cost '
                 'little.')),
    '00.2': (1, ('It is a floor on time: no forward reads its weights faster than the bandwidth '
                 'allows or multiplies faster than the peak. It says nothing about the ratio '
                 'c(n)/c(1), which section 4 measures against it.')),
    '00.3': (2, ('n* = (F/B)(b/2): halving b halves n*, for the same F. A CPU whose bf16 peak is '
                 "higher than its fp32 peak moves n* back up (section 5's curves).")),
    '01.1': (1, ("Accepted mass min(p, q) plus the residual's max(0, p - q) adds up to p: the "
                 "output is distributed exactly as the target's.")),
    '01.2': (2, ('The k-th token is added when the k - 1 drafts before it were accepted '
                 '(probability alpha^(k-1)), k = 1 .. gamma + 1 with the bonus: a geometric sum.')),
    '01.3': (0, ("A top-k child is not drawn, so its 'q' is 1: the one-child rule with q(x) = 1 "
                 'accepts with probability p(x) and leaves p with x removed.')),
    '02.1': (1, ('The feature is what the target computed *before* sampling: several next tokens '
                 'are likely. The sampled token resolves that uncertainty, which is why feature &'
                 ' shifted token beats feature only (EAGLE §3.1).')),
    '02.2': (2, ("The paper's 'second-to-top-layer' feature: the layer under lm_head, normed "
                 '(GLOSSARY.md, Feature).')),
    '02.3': (2, ("Feature and shifted token: the target's summary of the context plus which "
                 'branch was taken. Whether the measured ordering holds at this scale is what the'
                 " section's checks say.")),
    '03.1': (0, ('L = L_reg + w_cls L_cls with w_cls = 0.1 (EAGLE §3.2): the feature regression '
                 'keeps the head autoregressive in feature space, the classification term ties it'
                 ' to the tokens.')),
    '03.2': (1, ('Reused and frozen: the embedding (its input side) and lm_head (its output '
                 'side); trained: fc and one decoder layer.')),
    '03.3': (0, ('After the first step a chain reads predicted features; uniform noise on the '
                 'true features in training (EAGLE §3.2) makes the head tolerant of that error.')),
    '04.1': (2, ('Position = prefix + depth: siblings share one, and each path reads as a plain '
                 'sequence.')),
    '04.2': (0, ('The tree mask gives each node the context of its own path: prefix, ancestors, '
                 'itself.')),
    '04.3': (1, ('Values fall along every path, so whenever a node is among the best, so is its '
                 'parent.')),
    '05.1': (1, ("At T = 0 the target's choice after the parent is its argmax; a child carrying "
                 'that token is what vanilla decoding would have written, so the output equals '
                 "vanilla's.")),
    '05.2': (2, ("Compaction gathers the accepted path's entries behind the prefix: the cache "
                 'then equals one built by running the path alone (section 2 checks it).')),
    '05.3': (0, ("A stable cache: the head keeps only entries computed from the target's "
                 'features, so its errors do not compound from cycle to cycle.')),
    '05b.1': (1, ("The verification forward gives the target's choice after every node, so after "
                 'the accepted path one more token comes free.')),
    '05b.2': (0, ('Greedy verification accepts only what vanilla would have written, and the bonus'
                 " token is vanilla's next token: the text is vanilla's by construction.")),
    '05b.3': (2, ('Rejected branches are not part of the text; the kept cache must equal a plain '
                 "run's (the page's check after `keep`).")),
    '06.1': (0, ('A speedup is a ratio within one run, against the fastest way to decode without '
                 'drafting that the run measured, named.')),
    '06.2': (1, 'speedup = tau / (c(N)/c(1) + draft) = 1.3 / 1.4 < 1.'),
    '06.3': (1, ('On a GPU c(N)/c(1) stays near 1 for tens of tokens and big trees win; here '
                 'every verified token costs, so the bound peaks at small N.')),
    '06b.1': (2, ('Memory bound: the weights are read once and the arithmetic for 60 tokens hides '
                 "under the reading (appendix D's projection, named as such).")),
    '06b.2': (0, ('Row-count-dependent rounding changes logits by a few ulps; where two tokens '
                 "nearly tie, the argmax can differ from vanilla's one-token step (appendix C).")),
    '06b.3': (1, ('Appendix A walks from the model to the measurement one measured correction at a'
                 ' time.')),
    '07.1': (1, ('EAGLE-2 expands where path values are high and reranks: wide where the draft '
                 'hesitates, deep where it is confident.')),
    '07.2': (0, ("The head's lm_head over N tokens instead of V is most of a draft step's cost; a"
                 ' token outside the kept set can never be drafted, so acceptance drops a little.')),
    '07.3': (1, ('EAGLE-2 §3: confidence tracks acceptance, so growing the tree by value spends '
                 'the budget where tokens will be accepted.')),
    '08.1': (1, ("Three layers' hidden states (3H), fused by fc to H: low, middle and high "
                 'features (EAGLE-3 §3).')),
    '08.2': (0, ("Each training step unrolls a chain where step k reads step k - 1's output, with"
                 ' the matching attention mask: training sees the errors drafting will see.')),
    '08.3': (0, ('EAGLE-3 §3: the feature constraint limits what more data can teach the head; '
                 'token prediction alone scales with data.')),
}
