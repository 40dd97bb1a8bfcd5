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
