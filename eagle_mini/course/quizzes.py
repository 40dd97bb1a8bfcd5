"""The end-of-notebook quizzes' questions (`quiz.py`): text, choices, a hint for each wrong choice
and the right choice's digest. Why each right choice is right is `course.answers.QUIZ`.
"""
from eagle_mini.course.quiz import Question

QUIZZES = {
    '00': [
        Question('00.1',
                 ('At batch 1, why does a forward of 8 new tokens cost little more than a forward'
                  ' of 1 on a machine whose memory is the bottleneck?'),
                 (('The weights are read once per forward, whatever the number of tokens, and '
                   'reading them takes longer than the arithmetic'),
                  'The logits of the previous step are cached and reused',
                  'Attention over the cached prefix is free',),
                 {1: ("nothing of the previous step's logits is reused; compare the bytes a "
                      'forward reads with the FLOPs it does per token'),
                  2: ('attention grows with n and with the prefix; the flat part comes from the '
                      'weights, read once')},
                 '93b55e57070c179c77b5f2a49f74abbc2835c59c1fb4fab576e2d1edc3dd89c0'),
        Question('00.2',
                 ('The roofline says a forward of n tokens takes at least max(bP/B, 2Pn/F). What '
                  'does it bound?'),
                 ('The ratio c(n)/c(1), from below',
                  'The time of one forward, from below',
                  'The time of one forward, from above',),
                 {0: ('both ends of the ratio sit above their floors by different amounts: fixed '
                      "costs shared by every n can pull the measured ratio below the roofline's"),
                  2: ('real kernels add launches, small-matmul inefficiency and attention: they '
                      'can only be slower')},
                 '733ce23cd57c6ed851a335205c0a6773373a6b6048a2af2bd1d3fdd3944b2c8f'),
        Question('00.3',
                 ('In bf16 (2 bytes per weight) instead of fp32 (4), with the same peak F and '
                  "bandwidth B, the roofline's flat part ends at"),
                 ('the same n',
                  'twice the n',
                  'half the n',),
                 {0: 'n* = (F/B)(b/2) depends on the bytes per weight b',
                  1: ('halving b halves the bytes read per token of work: the machine turns '
                      'compute bound sooner')},
                 'd3a57801a70d769b487bd901f9a8cfb4d8a7afb50bb49ae65bb8cfaa49ae8092'),
    ],
    '01': [
        Question('01.1',
                 ('A draft token x ~ q is rejected (probability 1 - min(1, p(x)/q(x))). The token'
                  ' emitted instead is drawn from'),
                 ('p',
                  'norm(max(0, p - q))',
                  'norm(max(0, q - p))',),
                 {0: ('drawing from p again counts the mass the accept step already gave out: '
                      'tokens q also likes come out too often'),
                  2: ("that is the draft's excess, the mass the accept step turns down; the "
                      'target still needs what q lacks')},
                 'dee9eb269abd3976422f300d9a2fc93e67593c284b31899fdbf5453a46858b80'),
        Question('01.2',
                 ('With a per-token acceptance rate alpha and a chain of gamma drafts, tau '
                  '(tokens per cycle, bonus included) is'),
                 ('gamma * alpha + 1',
                  'alpha^gamma * (gamma + 1)',
                  '(1 - alpha^(gamma+1)) / (1 - alpha)',),
                 {0: ('a chain stops at its first rejection: later drafts count only if all '
                      'before them were accepted'),
                  1: ('that counts a cycle only when every draft is accepted; shorter cycles add '
                      'tokens too')},
                 'fe63d5c7813fac96607d6524fd41bd549b3a35337ad5303133e1b69abb0c77a0'),
        Question('01.3',
                 ("EAGLE-2's children are the draft's deterministic top-k. Which rule verifies "
                  'them losslessly at T > 0?'),
                 ('Accept x with probability p(x); on rejection set p(x) = 0 and renormalise',
                  "The p/q rule, removing each rejected x from q (EAGLE-1's rule)",
                  "Accept x when it is p's most likely token",),
                 {1: ('that rule is right for children *drawn* from q; on top-k children it is '
                      "biased (notebook 05's control catches it)"),
                  2: ('that is greedy verification, right at T = 0 only; at T > 0 it changes the '
                      'distribution')},
                 '16432d6c6abd5afbc4e0012eb85af1a1174179348c0473e33d2d805309e9dd45'),
    ],
    '02': [
        Question('02.1',
                 ('Why does the EAGLE head read the feature f_i together with the token t_(i+1) '
                  'that was sampled after it?'),
                 ('Shifting saves one embedding lookup per step',
                  ('f_i describes a distribution over next tokens; only the sampled token says '
                   'which branch the text took'),
                  't_(i+1) is the token the head must predict, so it is a label, not an input',),
                 {0: 'the head does one lookup either way; the point is information, not cost',
                  2: ('the head predicts f_(i+1) and, through lm_head, t_(i+2): t_(i+1) is '
                      'already known when it drafts')},
                 'fc47eac2f3fd7ffe219943a83f2583e4e1485ac2731641da77d06f699047e34b'),
        Question('02.2',
                 'A feature, in EAGLE-1, is',
                 ('the embedding of the last token',
                  "the target's logits at the last position",
                  ("the target's last hidden state after its final norm, the vector lm_head "
                   'multiplies'),),
                 {0: ('the embedding is an input of the target; the feature is what its last '
                      'layer outputs'),
                  1: ('logits are the vocabulary-sized scores; the feature is the hidden-size '
                      'vector before lm_head')},
                 'fd10bb639091decd2516ef72707f05fe4acdd99023418f0c5263a0c2399bc842'),
        Question('02.3',
                 ('The ablation trains the same head on four inputs. Which reads the most '
                  'information?'),
                 ('token only',
                  'feature only',
                  'feature and shifted token',),
                 {0: ("a token alone is what a small language model reads; the target's feature "
                      'is richer'),
                  1: 'the feature alone leaves open which of the likely next tokens was sampled'},
                 '9d4b586d7df4ba093b10045e4aed4b5d1acf6df98c6b7401b4c5a81a9f84ef3b'),
    ],
    '03': [
        Question('03.1',
                 "EAGLE-1's training loss is",
                 (('a smooth-L1 regression on the next feature plus 0.1 times the cross-entropy '
                   'of the tokens the predicted feature gives through the frozen lm_head'),
                  'the cross-entropy of the next token only',
                  "the mean squared error between the head's logits and the target's",),
                 {1: ("that is EAGLE-3's kind of loss; EAGLE-1 also asks the head to predict the "
                      'feature itself'),
                  2: ('the head outputs a feature, not logits of its own: lm_head is the '
                      "target's, frozen")},
                 'b297d2874bca4f0dd86f0ad218cd523dc68fea08838c9e214bbb6e3ffb40269a'),
        Question('03.2',
                 'What does an EAGLE-1 head take from the target instead of training its own?',
                 ('Nothing: it is a separate small model',
                  'The token embedding and the lm_head',
                  'Every decoder layer, frozen',),
                 {0: ('it trains one decoder layer and fc; the embedding and lm_head are the '
                      "target's, frozen"),
                  2: ("it runs one decoder layer of its own, not the target's stack: that is what"
                      ' makes it cheap')},
                 '81bb104911493aee8cc42609e1eb7a2942cf124ec193458fd20f25e49f970d3e'),
        Question('03.3',
                 "Why does training add noise to the target's features?",
                 (('When drafting, the head reads its own predicted features, which carry errors;'
                   ' noise teaches it to cope'),
                  'To regularise the frozen lm_head',
                  'To make training converge faster',),
                 {1: 'lm_head is frozen: no gradient reaches it',
                  2: ('noise makes the task harder, not faster; its purpose is robustness at '
                      'decoding')},
                 '4c6b4930b3231514371ccc9e74a9db7e07b76d5b368613ebf89fb965f4338440'),
    ],
    '04': [
        Question('04.1',
                 "A tree node's position id is",
                 ('the prefix length plus its index in the tree',
                  'its depth only',
                  'the prefix length plus its depth',),
                 {0: ('siblings are alternatives for the same place in the text: they share a '
                      'position'),
                  1: ('positions continue after the prefix; a node at depth d is d tokens after '
                      'it')},
                 '2e9661fbe8b4104b41529a0cb563b6766c2ae96c69096c67209c49644e4e118f'),
        Question('04.2',
                 'Which entries may a tree node attend to?',
                 ('The whole prefix, its ancestors and itself',
                  'Every tree node that comes before it',
                  'The prefix only',),
                 {1: ('a node from another branch is not part of its text: attending to it would '
                      'change the logits'),
                  2: ('then a node would not see the drafts above it, and its logits would not be'
                      " the path's")},
                 'eb39ca4c96e2b5800a4d3e5a435ed75509756d50984f2082d76f83661652bc95'),
        Question('04.3',
                 ('EAGLE-2 keeps the total_tokens - 1 candidates of highest value. Why is the '
                  'kept set always a connected tree?'),
                 ('Reranking adds the missing parents afterwards',
                  ("A child's value is its parent's plus a log-probability <= 0, never above its "
                   "parent's"),
                  'Candidates are kept depth by depth',),
                 {0: ("nothing is added back: the top values already include every kept node's "
                      'parent'),
                  2: 'reranking sorts all candidates by value, whatever their depth'},
                 'ddea2a872e18b9b4e85cabc80bbcfbffbf3005cf979c4d04805aa138ebcc30a8'),
    ],
    '05': [
        Question('05.1',
                 'Greedy verification accepts a child when',
                 ('its draft confidence is above 0.5',
                  "its token equals the target's argmax after its parent",
                  'the target gives it a higher probability than the draft did',),
                 {0: "confidence shapes the tree; acceptance is the target's decision alone",
                  2: "that is a sampling rule's ratio; at T = 0 only the argmax counts"},
                 '9dfad97a89ca47cc9773065622d07a23a9855f2692e5ccba4e3ee66809745851'),
        Question('05.2',
                 "After a cycle, the target's KV cache keeps",
                 ("every tree node's entries",
                  'the prefix only; the path is recomputed next cycle',
                  "the prefix and the accepted path's entries, moved to consecutive positions",),
                 {0: ('rejected branches are not part of the text; their entries would corrupt '
                      'later attention'),
                  1: ("the accepted path's entries were computed with the right positions and "
                      'mask: they are kept, not recomputed')},
                 'f70dc82669177fb670d6c715a22d7ceadcd31bb6fdf69ba9c172e1ad6ff84fd7'),
        Question('05.3',
                 "Why does the head re-run the accepted tokens on the target's true features?",
                 (('Its entries from drafting came from its own predicted features; true features'
                   ' anchor the next draft'),
                  'To compute the bonus token',
                  "Because the target's cache was compacted",),
                 {1: "the bonus token comes from the target's logits, not from the head",
                  2: "the head has a cache of its own; the target's compaction does not touch it"},
                 '79cfe8944f0190e0f75b32fd8be7f9bc794a5e6e7fe0cfa9c473f3dd9eff22ee'),
    ],
    '05b': [
        Question('05b.1',
                 'A cycle of the one-page loop always adds at least one token. Which?',
                 ('The root of the next tree',
                  "The bonus token: the target's own choice after the last accepted node",
                  "The head's most likely token",),
                 {0: ('the next root *is* that token, but it exists because the target chose it, '
                      'whatever the draft'),
                  2: "the head proposes; only the target's choice is certain"},
                 '1c224ad5069b4f94d62c386b41e13f440c0434c55234a05f8948c03dea11b161'),
        Question('05b.2',
                 "The page's EAGLE output equals vanilla's because",
                 ("every token it emits is the target's argmax given the tokens before it",
                  'the shipped head is well trained',
                  'the tree is large enough',),
                 {1: 'a poor head lowers tau, not correctness: rejected drafts cost time only',
                  2: ("any tree, even a chain of one, gives vanilla's text; size changes speed "
                      'only')},
                 '4a6de99b86f7d3f8422ea64afd6ac67dc2a608f3ba79bc0fb403d102ecd29696'),
        Question('05b.3',
                 "What would break if the loop kept the whole tree's KV entries after a cycle?",
                 ('Nothing; it would only use more memory',
                  "The head's draft would be wrong but the output right",
                  ('Later tokens would attend to rejected branches, and the text could part from '
                   "vanilla's"),),
                 {0: ('the cache is read by every later forward: stray entries change its '
                      'attention'),
                  1: "it is the target's cache: its logits, and so the output, would change"},
                 '40364dd17921731edc658fd4be60bb2f01d6e7352f6c1ad9e2a892959da0bcee'),
    ],
    '06': [
        Question('06.1',
                 'Against which vanilla should a speedup be reported?',
                 ('The fastest vanilla decoding measured in the same run',
                  "The package's own vanilla, whatever its speed",
                  "The paper's vanilla",),
                 {1: ('a slow baseline flatters every method; a learner can compile plain '
                      'decoding in two lines'),
                  2: "another machine's figure is not a ratio of this run"},
                 'e0c44dea47f2e42c0c0ee55b6daa885bd04b9148e9be67ab8117426db60f6700'),
        Question('06.2',
                 ('On a curve with c(16)/c(1) = 1.2 and a draft cost of 0.2 c(1) per cycle, a '
                  'method with a 16-token tree and tau 1.3 is, in the cost model,'),
                 ('faster than vanilla',
                  'slower than vanilla',
                  'exactly as fast',),
                 {0: 'break-even tau is c(N)/c(1) + draft cost = 1.4, above 1.3',
                  2: 'that would need tau = 1.4'},
                 'd4312e05f79315852bba7e8e92ebfb40614c7bf2aff3dd32683e73824b259f35'),
        Question('06.3',
                 'Why do small trees win on this CPU?',
                 ('The head is less accurate deep in a tree',
                  ("c(N)/c(1) rises with N, so a bigger tree's extra tau does not pay for its "
                   'verification'),
                  'Small trees need no tree mask',),
                 {0: ('acceptance falls with depth everywhere, GPUs included, where big trees '
                      'still win'),
                  2: 'every tree, small or big, is verified with a mask'},
                 'ae154265840a65fffe7438c7148f088ea0a57ce9b511e0f6680762b65e564c2d'),
    ],
    '06b': [
        Question('06b.1',
                 ('On a data-centre GPU at batch 1, verifying 60 tokens of a 7B target costs '
                  'about'),
                 ('sixty forwards',
                  'two forwards',
                  'one forward',),
                 {0: 'the tokens share one read of the weights: a forward is not paid per token',
                  1: ('the roofline keeps c(N)/c(1) at 1 up to hundreds of tokens; real kernels '
                      'add a little')},
                 '741cae1b629f46e4262f33dfd0be57078119e7237f1109bcd3d27d028c0ef3a0'),
        Question('06b.2',
                 'Why is bf16 without exact mode not lossless here?',
                 (('A tree forward sums in another order than a one-token forward, so a near-tie '
                   'can flip'),
                  'bf16 cannot represent every token id',
                  'The draft head runs in bf16',),
                 {1: 'token ids are integers; only the logits are bf16',
                  2: "the draft only proposes; only the target's verification decides the text"},
                 'ee8eaa8f51d2e5735d201392022d55f8e5553ec218b116639ebad2a60699af6d'),
        Question('06b.3',
                 'The cost model over-predicts most measured speedups because',
                 ('tau is measured wrongly',
                  ('a cycle costs more than c(N) plus drafting: the acceptance walk, compaction, '
                   "masks and the loop's Python"),
                  'the curve was measured on another machine',),
                 {0: 'tau is counted from the cycles themselves',
                  2: 'every run is read on its own curve, measured in the same run'},
                 '7cce3b7effd7b56852bf2fc78400e17d83d6ea66d7afd9909d61dfe60e64e174'),
    ],
    '07': [
        Question('07.1',
                 "How does EAGLE-2's tree differ from EAGLE-1's?",
                 ('It is always bigger',
                  "Its shape follows the draft's confidence, cycle by cycle",
                  'It is a chain',),
                 {0: 'at the same size the two differ in shape, not in number of nodes',
                  2: 'it is a tree: top-k at every expanded node'},
                 'efa5c79114a185b3e4e7e87d090304e566bd930c34677637724af82774cfebee'),
        Question('07.2',
                 'A reduced draft vocabulary makes drafting cheaper because',
                 ("the head's output layer multiplies only the kept rows",
                  "the target's lm_head shrinks too",
                  'the tree gets smaller',),
                 {1: 'the target keeps its whole vocabulary: verification is unchanged',
                  2: "the tree's size is set separately"},
                 '758f0d693e33e81b068670c0f556eae9169d57d34ccd364834274c1f0db3a36f'),
        Question('07.3',
                 "What does the draft's calibration give EAGLE-2?",
                 ('Nothing: it only matters for sampling',
                  ("Confidence estimates acceptance, so a path's value ranks it by its chance of "
                   'being accepted'),
                  'It makes greedy decoding lossless',),
                 {0: 'greedy trees are ranked by value too',
                  2: 'greedy verification is lossless with any draft'},
                 'f43ed0822c3b939e36220b4b57c9fcf6e9aa2c96eb90919c34798ad8fa24b125'),
    ],
    '08': [
        Question('08.1',
                 'An EAGLE-3 head reads',
                 ('the last hidden state after the final norm, as EAGLE-1',
                  'hidden states entering a low, a middle and a high decoder layer, fused by fc',
                  "the target's logits",),
                 {0: "that is EAGLE-1's feature; EAGLE-3 fuses several layers",
                  2: 'logits are vocabulary-sized; the head reads hidden states'},
                 '0690f64b126e82449e4e0d83ca908c692b16897db94d6f3f1b4219ffea410b04'),
        Question('08.2',
                 'The training-time test',
                 (('unrolls the head on its own outputs during training, so it learns from what '
                   'it will read when drafting'),
                  'evaluates the head on held-out text after each epoch',
                  'trains at the temperature used at test time',),
                 {1: ('that is validation; the training-time test changes what the head reads in '
                      'training'),
                  2: "temperature is a decoding setting; the test is about the head's inputs"},
                 'd137c59967b05f9ab09ba1695ab8e8ca88762d920b7e6d48a3b4ec603b4d7606'),
        Question('08.3',
                 "Why does EAGLE-3 drop EAGLE-1's feature regression loss?",
                 (("It predicts tokens directly; freed from matching the target's feature, the "
                   'head can use its own representation'),
                  'To save memory',
                  'Because the features are normalised',),
                 {1: 'the loss is cheap either way; the reason is what the head may learn',
                  2: 'normalisation does not make the regression unnecessary'},
                 '622ea5c82cfbf7913bf809f965985d645c8b80a7c5e92191bb547ff2afad46cb'),
    ],
}
