"""The bad inputs of ``test_bad_inputs``: files, flags, catalogs, traces, CSVs, metric
dumps and engine command lines, each with what its one-line error must say.

A case is ``(name, files to write {name: text}, argv with {tmp} for the folder the files
are written to, expected in the line)``; a text holding ``\udcff`` is written as bytes (that
character stands for the byte 0xff, which is not UTF-8).
"""

from __future__ import annotations

SCENARIO = "scenarios/default.yaml"
# specsim calibrate's measurement CSVs: step times, and speculative runs (category E)
CALIBRATE_HEADER = ("model,gpu,tp,pp,weight_bits,kv_bits,compute_dtype,batch,context,tokens,"
                    "offload,measured_s,source")
CALIBRATE_ROW = "llama-3-8b,h100,1,1,16,16,bf16,1,128,1,0,0.01,x"
SPEC_HEADER = ("category,framework,framework_version,model,gpu,tp,ep,weight_bits,kv_bits,"
               "compute_dtype,method,draft,draft_vocab,shape,acceptance_length,load,batch,"
               "context,output_tokens,metric,measured_base,measured_spec,split,source,notes")
SPEC_ROW = ("E,sglang,,llama-3.1-8b,h200,1,1,16,16,,eagle3,x,32000,chain:3,2.93,batch,1,128,"
            "512,tokens_per_s,190,415,fit,x,")
CASES = [
    # scenario files
    ("yaml-syntax", {"s.yaml": "a: [1, 2\n"}, ["run", "{tmp}/s.yaml"], "not valid YAML"),
    ("yaml-tab", {"s.yaml": "a:\n\t- 1\n"}, ["run", "{tmp}/s.yaml"], "not valid YAML"),
    ("yaml-python-tag", {"s.yaml": "a: !!python/object:os.system x\n"},
     ["run", "{tmp}/s.yaml"], "not valid YAML"),
    ("yaml-duplicate", {"s.yaml": "name: a\nname: b\n"}, ["run", "{tmp}/s.yaml"],
     "duplicate key 'name'"),
    ("yaml-empty", {"s.yaml": ""}, ["run", "{tmp}/s.yaml"], "is empty"),
    ("yaml-list", {"s.yaml": "- 1\n"}, ["run", "{tmp}/s.yaml"], "must be a YAML mapping"),
    ("yaml-deep", {"s.yaml": "a: " + "[" * 5000 + "]" * 5000 + "\n"},
     ["run", "{tmp}/s.yaml"], "s.yaml"),
    ("yaml-binary", {"s.yaml": "name: \udcff\n"}, ["run", "{tmp}/s.yaml"], "not UTF-8"),
    ("yaml-missing", {}, ["run", "{tmp}/nope.yaml"], "nope.yaml: cannot read scenario"),
    ("unknown-section", {"s.yaml": "colour: red\n"}, ["run", "{tmp}/s.yaml"],
     "colour: unknown field"),
    ("inf-rate", {"s.yaml": "workload: {rate_per_s: 1e400}\n"}, ["run", "{tmp}/s.yaml"],
     "workload.rate_per_s"),
    ("nan-alpha", {"s.yaml": "acceptance: {kind: iid, alpha: .nan}\n"},
     ["run", "{tmp}/s.yaml"], "acceptance.alpha"),
    ("sci-rate-too-big", {"s.yaml": "workload: {rate_per_s: 1e300}\n"},
     ["run", "{tmp}/s.yaml"], "workload.rate_per_s: must be <= 1e+06"),
    ("huge-int", {"s.yaml": "run: {requests: 100000000000000000000000}\n"},
     ["run", "{tmp}/s.yaml"], "run.requests: must be <= 100000000"),
    ("float-requests", {"s.yaml": "run: {requests: 1e3}\n"}, ["run", "{tmp}/s.yaml"],
     "run.requests"),
    ("string-number", {"s.yaml": "workload: {rate_per_s: fast}\n"}, ["run", "{tmp}/s.yaml"],
     "workload.rate_per_s"),
    ("bool-number", {"s.yaml": "deployment: {tp: true}\n"}, ["run", "{tmp}/s.yaml"],
     "deployment.tp"),
    ("gamma-huge", {"s.yaml": "variants: [{name: g, policy: {kind: fixed, gamma: 100000}}]\n"},
     ["run", "{tmp}/s.yaml"], "variants.0.policy.gamma: must be <= 64"),
    ("tree-huge", {"s.yaml": "variants: [{name: t, policy: {kind: tree, "
                             "expansion: [8, 8, 8, 8]}}]\n"},
     ["run", "{tmp}/s.yaml"], "at most 4096"),
    ("adaptive-huge", {"s.yaml": "variants: [{name: a, policy: {kind: adaptive, "
                                 "max_gamma: 1000}}]\n"},
     ["run", "{tmp}/s.yaml"], "max_gamma: must be <= 64"),
    ("ladder-gamma", {"s.yaml": "variants: [{name: l, policy: {kind: batch_ladder, "
                                "ladder: [[1, 10, 99]]}}]\n"},
     ["run", "{tmp}/s.yaml"], "ladder: gamma 99"),
    ("poisson-users", {"s.yaml": "workload: {arrivals: poisson, users: 3}\n"},
     ["run", "{tmp}/s.yaml"], "workload.users: unknown field"),
    ("offline-rate", {"s.yaml": "workload: {arrivals: offline, rate_per_s: 3}\n"},
     ["run", "{tmp}/s.yaml"], "workload.rate_per_s: unknown field"),
    ("arrivals-bogus", {"s.yaml": "workload: {arrivals: sometimes}\n"},
     ["run", "{tmp}/s.yaml"], "workload.arrivals: must be one of"),
    ("prefix-groups-alone", {"s.yaml": "workload: {shared_prefix_groups: 4}\n"},
     ["run", "{tmp}/s.yaml"], "workload.shared_prefix_groups: 4 groups need"),
    ("prefix-caching-word", {"s.yaml": "scheduler: {prefix_caching: sometimes}\n"},
     ["run", "{tmp}/s.yaml"], "scheduler.prefix_caching: input should be a valid boolean"),
    ("tp-huge", {"s.yaml": "deployment: {tp: 100000}\n"}, ["run", "{tmp}/s.yaml"],
     "deployment.tp: must be <= 1024"),
    ("horizon-huge", {"s.yaml": "run: {horizon_s: 1e9}\n"}, ["run", "{tmp}/s.yaml"],
     "run.horizon_s: must be <= 1e+07"),
    ("seqs-huge", {"s.yaml": "scheduler: {max_num_seqs: 10000000}\n"},
     ["run", "{tmp}/s.yaml"], "scheduler.max_num_seqs: must be <= 65536"),
    ("length-huge", {"s.yaml": "workload: {prompt: {kind: fixed, tokens: 100000000}}\n"},
     ["run", "{tmp}/s.yaml"], "workload.prompt.tokens: must be <= 10000000"),
    ("rates-too-many", {"s.yaml": "acceptance: {kind: positional, rates: ["
                                  + ", ".join(["0.5"] * 65) + "]}\n"},
     ["run", "{tmp}/s.yaml"], "acceptance.rates: allows at most 64"),
    ("preset-unknown", {"s.yaml": "acceptance: {kind: preset, name: nope}\n"},
     ["run", "{tmp}/s.yaml"], "unknown acceptance preset 'nope'"),
    ("drafter-unknown", {"s.yaml": "variants: [{name: x, policy: {kind: fixed, gamma: 2}, "
                                   "drafter: {method: medusa9}}]\n"},
     ["run", "{tmp}/s.yaml"], "variants.0.drafter.method: must be one of"),
    ("draft-with-ngram", {"s.yaml": "models: {method: ngram, draft: llama-3.2-1b}\n"},
     ["run", "{tmp}/s.yaml"], "models.draft: a draft model is only used"),
    ("ngram-no-rate", {"s.yaml": "models: {method: ngram}\n"}, ["run", "{tmp}/s.yaml"],
     "proposal_rate: required"),
    ("overlap-colocated", {"s.yaml": "deployment: {draft_overlap: parallel}\n"},
     ["run", "{tmp}/s.yaml"], "draft_overlap: 'parallel' needs draft_placement"),
    ("blocks-override-huge", {"s.yaml": "scheduler: {num_gpu_blocks_override: 999999999}\n"},
     ["run", "{tmp}/s.yaml"], "num_gpu_blocks_override: must be <="),
    ("name-too-long", {"s.yaml": "name: " + "a" * 300 + "\n"}, ["run", "{tmp}/s.yaml"],
     "s.yaml: name: allows at most 200 characters"),
    ("variant-name-too-long", {"s.yaml": "variants: [{name: " + "v" * 201 + ", policy: "
                                         "{kind: none}}]\n"},
     ["run", "{tmp}/s.yaml"], "variants.0.name: allows at most 200 characters"),
    # data files named by scenarios
    ("trace-missing", {"s.yaml": "acceptance: {kind: trace, file: {tmp}/none.npz}\n"},
     ["run", "{tmp}/s.yaml"], "none.npz"),
    ("trace-corrupt", {"t.npz": "not a zip", "s.yaml": "acceptance: {kind: trace, "
                                                      "file: {tmp}/t.npz}\n"},
     ["run", "{tmp}/s.yaml"], "t.npz"),
    ("replay-bad-row", {"r.csv": "arrival_at,prompt_tokens,output_tokens\n0,10,x\n",
                        "s.yaml": "workload: {arrivals: replay, file: {tmp}/r.csv}\n"},
     ["run", "{tmp}/s.yaml"], "r.csv"),
    ("replay-fewer-rows", {"r.csv": "arrival_at,prompt_tokens,output_tokens\n0,10,5\n",
                           "s.yaml": "workload: {arrivals: replay, file: {tmp}/r.csv}\n"
                                     "run: {requests: 2}\n"},
     ["run", "{tmp}/s.yaml"], "r.csv: holds 1 requests, fewer than run.requests 2"),
    ("replay-arrival-far", {"r.csv": "arrival_at,prompt_tokens,output_tokens\n0,10,5\n"
                                     "1e300,10,5\n",
                            "s.yaml": "workload: {arrivals: replay, file: {tmp}/r.csv}\n"
                                      "run: {requests: 2}\n"},
     ["run", "{tmp}/s.yaml"], "s.yaml: workload: request 1 arrives at 1e+300 s, past 4.504e+09"),
    ("rate-tiny", {"s.yaml": "workload: {rate_per_s: 1e-300}\nrun: {requests: 3}\n"},
     ["run", "{tmp}/s.yaml"], "s.yaml: workload: request 0 arrives at"),
    ("replay-no-header", {"r.csv": "0,10,10\n",
                          "s.yaml": "workload: {arrivals: replay, file: {tmp}/r.csv}\n"},
     ["run", "{tmp}/s.yaml"], "r.csv"),
    ("empirical-missing-col", {"l.csv": "a\n1\n", "s.yaml": "workload: {prompt: {kind: "
                               "empirical, file: {tmp}/l.csv, column: tokens}}\n"},
     ["run", "{tmp}/s.yaml"], "tokens"),
    ("mooncake-bad-json", {"m.jsonl": "{\"timestamp\": 1,\n", "s.yaml": "workload: "
                           "{arrivals: trace, format: mooncake, file: {tmp}/m.jsonl}\n"},
     ["run", "{tmp}/s.yaml"], "line 1"),
    ("metrics-bad", {"m.prom": "vllm:spec_decode_num_drafts_total{x} 1\n",
                     "s.yaml": "acceptance: {kind: vllm_metrics, file: {tmp}/m.prom}\n"},
     ["run", "{tmp}/s.yaml"], "line 1: malformed labels"),
    ("catalog-bad-yaml", {"c.yaml": "gpus: [\n", "s.yaml": "deployment: {catalog: "
                                                           "{tmp}/c.yaml}\n"},
     ["run", "{tmp}/s.yaml"], "c.yaml"),
    ("catalog-bad-field", {"c.yaml": "gpus: {h100: {hbm_gb: -1}}\n",
                           "s.yaml": "deployment: {catalog: {tmp}/c.yaml}\n"},
     ["run", "{tmp}/s.yaml"], "gpus.h100"),
    ("catalog-unknown-section", {"c.yaml": "cpus: {}\n",
                                 "s.yaml": "deployment: {catalog: {tmp}/c.yaml}\n"},
     ["run", "{tmp}/s.yaml"], "unknown section 'cpus'"),
    ("catalog-vocab-huge", {"c.yaml": "models: {big: {source: x, config: {model_type: llama, "
                                      "hidden_size: 4096, intermediate_size: 14336, "
                                      "num_hidden_layers: 32, num_attention_heads: 32, "
                                      "vocab_size: 1000000000000, "
                                      "max_position_embeddings: 8192}}}\n",
                            "s.yaml": "deployment: {catalog: {tmp}/c.yaml}\n"
                                      "models: {target: big, draft: null}\n"
                                      "variants: [{name: none, policy: {kind: none}}]\n"},
     ["run", "{tmp}/s.yaml"], "c.yaml: models.big.config.vocab_size: Input should be less"),
    ("config-json-vocab-huge", {"config.json": '{"model_type": "llama", "hidden_size": 4096, '
                                               '"intermediate_size": 14336, '
                                               '"num_hidden_layers": 32, '
                                               '"num_attention_heads": 32, '
                                               '"vocab_size": 1e12, '
                                               '"max_position_embeddings": 8192}'},
     ["run", "--from-vllm", "vllm serve {tmp}/config.json"],
     "config.json: vocab_size: Input should be less than or equal to 4194304"),
    ("model-json-missing", {}, ["hw", "step", "--model", "{tmp}/none.json", "--gpu", "h100",
                                "--batch", "1", "--context", "1"], "none.json"),
    # flags
    ("set-malformed", {}, ["run", "--set", "nonsense"], "--set nonsense"),
    ("set-bad-yaml", {}, ["run", "--set", "run.requests=[1"], "not valid YAML"),
    ("set-no-item", {}, ["run", "--set", "variants.9.policy.gamma=2"], "no such list item"),
    ("report-conflict", {}, ["run", "--no-report", "--report-requests", "5"],
     "--report-requests 5: only sizes the report"),
    ("warmup-negative", {}, ["run", "--warmup", "-1"], "--warmup"),
    ("seed-negative", {}, ["run", "--seed", "-1"], "run.seed"),
    ("out-is-file", {"f": "x"}, ["run", "--out", "{tmp}/f"], "exists and is not a folder"),
    ("bench-requests", {}, ["bench", "--requests", "0"], "--requests"),
    ("sweep-no-axis", {}, ["sweep", SCENARIO], "nothing to sweep"),
    ("sweep-bad-vary", {}, ["sweep", SCENARIO, "--vary", "x"], "--vary x"),
    ("sweep-repeat", {}, ["sweep", SCENARIO, "--vary", "workload.rate_per_s=1,1"],
     "is repeated"),
    ("sweep-vary-twice", {}, ["sweep", SCENARIO, "--vary", "workload.rate_per_s=2,4",
                              "--vary", "workload.rate_per_s=8"],
     "--vary workload.rate_per_s: given twice"),
    ("sweep-huge", {}, ["sweep", SCENARIO, "--vary", "run.seed=" + ",".join(map(str, range(101))),
                        "--vary", "workload.rate_per_s=" + ",".join(map(str, range(1, 101)))],
     "at most 10000"),
    ("plan-no-slo", {"s.yaml": "slo: {}\n"}, ["plan", "{tmp}/s.yaml"], "no SLO"),
    ("plan-bad-slo", {}, ["plan", SCENARIO, "--slo", "ttft=1s"], "--slo"),
    ("plan-candidates-missing", {}, ["plan", SCENARIO, "--candidates", "{tmp}/c.yaml"],
     "c.yaml"),
    ("plan-target-rate-inf", {}, ["plan", SCENARIO, "--target-rate", "inf"],
     "--target-rate: requests/s, must be > 0"),
    ("out-name-too-long", {}, ["run", "--out", "{tmp}/" + "o" * 300 + "/x"],
     "is 300 bytes; a folder name may have at most 255"),
    ("out-last-name-too-long", {}, ["run", "--out", "{tmp}/" + "o" * 250],
     "is 250 bytes; a folder name may have at most 238"),
    ("claims-unknown-group", {}, ["claims", "--only", "nope"], "unknown claim group"),
    ("trace-bad-sigma", {}, ["trace", "--draft", "perturbed", "--sigma", "-1"], "--sigma"),
    # real command lines
    ("vllm-unknown-flag", {}, ["run", "--from-vllm", "vllm serve meta-llama/Llama-3.1-8B "
                                                     "--swap-space 4"],
     "--swap-space: not a vllm serve flag"),
    ("vllm-unknown-model", {}, ["run", "--from-vllm", "vllm serve acme/none"],
     "unknown model 'acme/none'"),
    ("vllm-not-vllm", {}, ["run", "--from-vllm", "python serve.py"], "must start with"),
    ("vllm-bad-json", {}, ["run", "--from-vllm", "vllm serve meta-llama/Llama-3.1-8B "
                                                 "--speculative-config '{x'"], "not valid JSON"),
    # the covering tree <21,...> of 21^7 nodes was listed before any check: MemoryError
    ("vllm-tree-huge", {}, ["run", "--from-vllm", "vllm serve meta-llama/Llama-3.1-8B "
                            "--speculative-config '{\"method\": \"eagle\", "
                            "\"num_speculative_tokens\": 14, \"speculative_token_tree\": \""
                            + str([(0,) * d for d in range(1, 8)]
                                  + [(20,) * d for d in range(1, 8)]) + "\"}'"],
     "--speculative-config: speculative_token_tree: the covering expansion tree "
     "<21,21,21,21,21,21,21> has 1891142967 nodes; at most 4096"),
    ("vllm-switch-value", {}, ["run", "--from-vllm", "vllm serve meta-llama/Llama-3.1-8B "
                                                     "--enable-chunked-prefill=false"],
     "--enable-chunked-prefill: a switch, it takes no value"),
    ("sglang-switch-value", {}, ["run", "--from-sglang", "python -m sglang.launch_server "
                                 "--model-path meta-llama/Llama-3.1-8B "
                                 "--disable-radix-cache=true"],
     "--disable-radix-cache: a switch, it takes no value"),
    # an unset variable: --from-vllm "$CMD" must not quietly run the default scenario
    ("vllm-empty", {}, ["run", "--from-vllm", ""], "--from-vllm: the command line is empty"),
    ("sglang-empty", {}, ["run", "--from-sglang", ""],
     "--from-sglang: the command line is empty"),
    ("vllm-blank", {}, ["run", "--from-vllm", " "], "--from-vllm: the command line is empty"),
    ("sglang-blank", {}, ["run", "--from-sglang", "\t"],
     "--from-sglang: the command line is empty"),
    ("bench-unknown-flag", {}, ["run", "--bench", "vllm bench serve --foo 1"],
     "--foo: not a vllm bench serve flag"),
    ("bench-dataset", {}, ["run", "--bench", "vllm bench serve --dataset-name hf"],
     "only the random dataset"),
    ("sglang-unknown-flag", {}, ["run", "--from-sglang", "python -m sglang.launch_server "
                                 "--model-path meta-llama/Llama-3.1-8B --zap 1"],
     "--zap: not a launch_server flag"),
    # names become folders: '..' as a variant wrote its records into the run's parent
    ("variant-name-dots", {"s.yaml": "variants: [{name: '..', policy: {kind: none}}]\n"},
     ["run", "{tmp}/s.yaml"],
     "s.yaml: variants.0.name: must use only letters, digits and _ . = -, not dots alone, "
     "got '..'"),
    ("variant-name-dot-set", {}, ["run", "--set", "variants.1.name=."],
     "(--set variants.1.name=.): variants.1.name: must use only"),
    ("name-dots", {"s.yaml": "name: '...'\n"}, ["run", "{tmp}/s.yaml"],
     "s.yaml: name: must use only letters, digits and _ . = -, not dots alone"),
    # a length distribution's own checks name prompt or output (they said "workload: high")
    ("uniform-high-below-low", {"s.yaml": "workload: {prompt: {kind: uniform, low: 100, "
                                          "high: 10}}\n"},
     ["run", "{tmp}/s.yaml"], "s.yaml: workload.prompt.high: must be >= low (100), got 10"),
    ("lognormal-median-and-mean", {"s.yaml": "workload: {output: {kind: lognormal, sigma: 1, "
                                             "median_tokens: 10, mean_tokens: 20}}\n"},
     ["run", "{tmp}/s.yaml"],
     "workload.output.median_tokens: give exactly one of median_tokens or mean_tokens"),
    ("lognormal-bound-keeps-nothing", {"s.yaml": "workload: {output: {kind: lognormal, "
                                                 "sigma: 0.1, median_tokens: 1000, "
                                                 "max_tokens: 10}}\n"},
     ["run", "{tmp}/s.yaml"], "workload.output.max_tokens: 10 keeps only 0.00% of"),
    ("set-uniform-high-below-low", {}, ["run", "--set", "workload.prompt={kind: uniform, "
                                                        "low: 9, high: 3}"],
     "(--set workload.prompt={kind: uniform, low: 9, high: 3}): workload.prompt.high"),
    # an unset variable: --bench "$BENCH" must not quietly run the scenario's own workload
    ("bench-empty", {}, ["run", "--bench", ""], "--bench: the command line is empty"),
    ("bench-blank", {}, ["run", "--bench", "  "], "--bench: the command line is empty"),
    ("bench-burstiness-inf", {}, ["run", "--bench", "vllm bench serve --request-rate 4 "
                                                    "--burstiness inf"],
     "--bench: --burstiness: must be a finite number > 0, got inf"),
    ("bench-burstiness-nan", {}, ["run", "--bench", "vllm bench serve --request-rate 4 "
                                                    "--burstiness nan"],
     "--bench: --burstiness: must be a finite number > 0, got nan"),
    # deeply nested values: PyYAML and json recurse once per level (RecursionError)
    ("set-deep", {}, ["run", "--set", "name=" + "[" * 5000 + "]" * 5000],
     "--set name=...: value nested too deeply"),
    ("bench-set-deep", {}, ["bench", "--set", "name=" + "[" * 5000 + "]" * 5000],
     "--set name=...: value nested too deeply"),
    ("sweep-vary-deep", {}, ["sweep", SCENARIO, "--vary", "name=" + "[" * 5000 + "]" * 5000],
     "--vary name=...: a value nested too deeply"),
    ("vllm-spec-json-deep", {}, ["run", "--from-vllm", "vllm serve meta-llama/Llama-3.1-8B "
                                 "--speculative-config '" + "[" * 100000 + "]" * 100000 + "'"],
     "--from-vllm: --speculative-config: nested too deeply"),
    # ast.literal_eval's own limits: its memory (a chain of signs) or its recursion
    ("vllm-tree-sign-chain", {}, ["run", "--from-vllm", "vllm serve meta-llama/Llama-3.1-8B "
                                  "--speculative-config '{\"method\": \"eagle\", "
                                  "\"num_speculative_tokens\": 2, \"speculative_token_tree\": \""
                                  + "-" * 100000 + "1\"}'"],
     "speculative_token_tree: a list of node paths such as \"[(0,), (0, 0), (0, 1)]\" is "
     "required, got '" + "-" * 60 + "'... (100001 characters)"),
    ("vllm-tree-sum-chain", {}, ["run", "--from-vllm", "vllm serve meta-llama/Llama-3.1-8B "
                                 "--speculative-config '{\"method\": \"eagle\", "
                                 "\"num_speculative_tokens\": 2, \"speculative_token_tree\": "
                                 "\"1" + "+1" * 50000 + "\"}'"],
     "speculative_token_tree: a list of node paths"),
    # libyaml builds a document recursively in C: 40000 levels were a segmentation fault
    ("catalog-deep", {"c.yaml": "gpus: " + "[" * 100000 + "]" * 100000 + "\n"},
     ["hw", "list", "--catalog", "{tmp}/c.yaml"],
     "c.yaml: nested more than 100 deep to be a catalog file"),
    ("catalog-deep-dashes", {"c.yaml": "gpus:\n  " + "- " * 100000 + "1\n",
                             "s.yaml": "deployment: {catalog: {tmp}/c.yaml}\n"},
     ["run", "{tmp}/s.yaml"], "c.yaml: nested more than 100 deep to be a catalog file"),
    ("catalog-section-list", {"c.yaml": "gpus: [" + ", ".join(["[1]"] * 2000) + "]\n"},
     ["hw", "list", "--catalog", "{tmp}/c.yaml"],
     "c.yaml: gpus: must map ids to entries, got list"),
    ("mooncake-deep", {"m.jsonl": "[" * 100000 + "]" * 100000 + "\n",
                       "s.yaml": "workload: {arrivals: trace, format: mooncake, "
                                 "file: {tmp}/m.jsonl}\n"},
     ["run", "{tmp}/s.yaml"], "m.jsonl: line 1: nested too deeply"),
    ("sharegpt-deep", {"g.json": "[" * 100001 + "]" * 100001,
                       "s.yaml": "workload: {arrivals: trace, format: sharegpt, "
                                 "file: {tmp}/g.json, rate_per_s: 1}\n"},
     ["run", "{tmp}/s.yaml"], "g.json: line 1: nested too deeply"),
    ("config-json-deep", {"config.json": "[" * 100000 + "]" * 100000},
     ["hw", "step", "--model", "{tmp}/config.json", "--gpu", "h100", "--batch", "1",
      "--context", "1"], "config.json: nested too deeply"),
    # refused while the grid is computed: no progress bar before the line, and no runs/
    # folder left behind (staged_folder made it to hold the grid)
    ("grid-theta-negative", {}, ["grid", "--target", "llama-3-8b", "--draft", "llama-3.2-1b",
                                 "--gpu", "h100", "--alpha", "0.8", "--tree", "k,1",
                                 "--contexts", "128", "--theta", "-1"],
     "theta: must be a finite number >= 0, got -1.0"),
    ("grid-tokens-per-verify-count", {}, ["grid", "--target", "llama-3-8b", "--draft",
                                          "llama-3.2-1b", "--gpu", "h100", "--alpha", "0.8",
                                          "--tree", "k,1", "--contexts", "128", "--widths",
                                          "1,2", "--tokens-per-verify", "1.5"],
     "tokens-per-verify: need one value per tree (2), got 1"),
    ("trace-seed-negative", {}, ["trace", "--seed", "-1"],
     "--seed: must be in 0..9223372036854775807, got -1"),
    # an unset variable: --only "$GROUP" must not run every group (a minute of work)
    ("claims-only-empty", {}, ["claims", "--only", ""], "--only: names no claim group, got ''"),
    ("claims-only-commas", {}, ["claims", "--only", " , "],
     "--only: names no claim group, got ' , '"),
    # an unset variable: --slo "$SLO" / --candidates "$FILE" must not fall back to the
    # scenario's own SLO and variants
    ("plan-slo-empty", {}, ["plan", SCENARIO, "--slo", ""],
     "--slo : '' must look like ttft_p99=2s"),
    ("plan-slo-twice", {}, ["plan", SCENARIO, "--slo", "ttft_p99=1s,ttft_p99=2s"],
     "--slo ttft_p99=1s,ttft_p99=2s: ttft_p99: given twice"),
    ("plan-slo-overflow", {}, ["plan", SCENARIO, "--slo", "ttft_p99=1e400s"],
     "--slo ttft_p99=1e400s: ttft_p99: need a positive time such as 2s, 50ms, got '1e400s'"),
    # an unset variable: --out "$DIR" is the working directory, refused, not the default
    ("grid-out-empty", {}, ["grid", "--target", "llama-3-8b", "--draft", "llama-3.2-1b",
                            "--gpu", "h100", "--alpha", "0.8", "--out", ""],
     "--out .: holds the working directory"),
    ("claims-out-empty", {}, ["claims", "--only", "leviathan", "--out", ""],
     "--out .: holds the working directory"),
    ("sweep-out-empty", {}, ["sweep", SCENARIO, "--vary", "run.seed=1,2", "--out", ""],
     "--out .: holds the working directory"),
    ("plan-out-empty", {}, ["plan", SCENARIO, "--out", ""],
     "--out .: holds the working directory"),
    # sweep's own inputs
    ("sweep-scheduler-empty", {}, ["sweep", SCENARIO, "--vary", "run.seed=1,2",
                                   "--scheduler", ""],
     "--scheduler '': cannot connect: missing port number in address ''"),
    ("sweep-scheduler-scheme", {}, ["sweep", SCENARIO, "--vary", "run.seed=1,2",
                                    "--scheduler", "carrier://x:1"],
     "--scheduler 'carrier://x:1': cannot connect: unknown address scheme 'carrier'"),
    ("sweep-vary-no-item", {}, ["sweep", SCENARIO, "--vary", "variants.5.policy.gamma=1,2"],
     "--vary variants.5.policy.gamma=1: variants.5: no such list item"),
    ("sweep-block-empty-key", {"s.yaml": "sweep: {vary: {'': [1, 2]}}\n"},
     ["sweep", "{tmp}/s.yaml"], "s.yaml: sweep.vary: '' is not a dotted key"),
    ("sweep-block-list-and-vary", {"s.yaml": "sweep: []\n"},
     ["sweep", "{tmp}/s.yaml", "--vary", "run.seed=1,2"],
     "s.yaml: sweep: must be a mapping with one key, vary: {key: [values]}"),
    ("sweep-block-unknown-field", {"s.yaml": "sweep: {vary: {colour: [1, 2]}}\n"},
     ["sweep", "{tmp}/s.yaml"], "s.yaml (sweep.vary colour=1): colour: unknown field"),
    # a column named twice, or cells past the header: one value was read, the other dropped
    ("replay-column-twice", {"r.csv": "arrival_at,prompt_tokens,output_tokens,prompt_tokens\n"
                                      "0,10,5,3\n1,10,5,3\n",
                             "s.yaml": "workload: {arrivals: replay, file: {tmp}/r.csv}\n"
                                       "run: {requests: 2}\n"},
     ["run", "{tmp}/s.yaml"], "r.csv: line 1: column 'prompt_tokens' given twice"),
    ("burstgpt-negative-time", {"b.csv": "Timestamp,Model,Request tokens,Response tokens,"
                                         "Total tokens,Log Type\n"
                                         "-5,ChatGPT,10,5,15,Conversation log\n"
                                         "1,ChatGPT,10,5,15,Conversation log\n",
                                "s.yaml": "workload: {arrivals: trace, format: burstgpt, "
                                          "file: {tmp}/b.csv}\nrun: {requests: 2}\n"},
     ["run", "{tmp}/s.yaml"], "b.csv: line 2: Timestamp: must be >= 0"),
    ("azure-column-twice", {"a.csv": "TIMESTAMP,ContextTokens,GeneratedTokens,ContextTokens\n"
                                     "2023-11-16 18:15:46.0,10,5,7\n",
                            "s.yaml": "workload: {arrivals: trace, format: azure, "
                                      "file: {tmp}/a.csv}\n"},
     ["run", "{tmp}/s.yaml"], "a.csv: line 1: column 'ContextTokens' given twice"),
    ("empirical-column-twice", {"l.csv": "n,n\n5,6\n", "s.yaml": "workload: {prompt: {kind: "
                                "empirical, file: {tmp}/l.csv, column: n}}\n"},
     ["run", "{tmp}/s.yaml"], "l.csv: line 1: column 'n' given twice"),
    ("empirical-extra-cells", {"l.csv": "n\n5,6\n", "s.yaml": "workload: {prompt: {kind: "
                               "empirical, file: {tmp}/l.csv, column: n}}\n"},
     ["run", "{tmp}/s.yaml"], "l.csv: line 2: 2 cells for 1 columns"),
    ("calibrate-column-twice", {"m.csv": CALIBRATE_HEADER + ",gpu\n" + CALIBRATE_ROW + ",h200\n"},
     ["calibrate", "{tmp}/m.csv"], "m.csv: line 1: column 'gpu' given twice"),
    ("calibrate-extra-cells", {"m.csv": CALIBRATE_HEADER + "\n" + CALIBRATE_ROW + ",x,y\n"},
     ["calibrate", "{tmp}/m.csv"], "m.csv: line 2: 15 cells for 13 columns"),
    # csv.DictReader puts extra cells in a list, which .strip() met: AttributeError
    ("calibrate-spec-extra-cells", {"s.csv": SPEC_HEADER + "\n" + SPEC_ROW + ",x,y\n"},
     ["calibrate", "{tmp}/s.csv"], "s.csv: line 2: 27 cells for 25 columns"),
    # the gauge is checked by the calibrated model, whose own field (mean_tokens) it named
    ("sglang-metrics-too-long", {"m.prom": "sglang:spec_accept_length{model_name=\"m\"} 9.5\n",
                                 "s.yaml": "acceptance: {kind: sglang_metrics, "
                                           "file: {tmp}/m.prom, num_steps: 3}\n"},
     ["run", "{tmp}/s.yaml"],
     "m.prom: sglang:spec_accept_length with num_steps 3: must be in [1, 4] for depth 3, "
     "got 9.5"),
    # output folders: nothing SpecSim did not write is replaced, whatever --force says
    ("out-root-force", {}, ["run", "--out", "/", "--force"],
     "--out /: holds the working directory"),
    ("out-force-foreign", {"f": "x"}, ["run", "--out", "{tmp}", "--force"],
     "not a folder SpecSim wrote (no .specsim-output file in it)"),
    ("out-not-empty", {"f": "x"}, ["run", "--out", "{tmp}"],
     "exists and is not empty; give --force"),
    ("out-parent-is-file", {"f": "x"}, ["run", "--out", "{tmp}/f/sub"],
     "f: exists and is not a folder"),
    ("out-utf8-name-too-long", {}, ["run", "--out", "{tmp}/" + "é" * 130],
     "is 260 bytes; a folder name may have at most 238"),
    ("sweep-out-force-foreign", {"f": "x"}, ["sweep", SCENARIO, "--vary", "run.seed=1,2",
                                             "--out", "{tmp}", "--force"],
     "not a folder SpecSim wrote"),
    ("grid-out-force-foreign", {"f": "x"}, ["grid", "--target", "llama-3-8b", "--draft",
                                            "llama-3.2-1b", "--gpu", "h100", "--alpha", "0.8",
                                            "--out", "{tmp}", "--force"],
     "not a folder SpecSim wrote"),
    ("plan-out-is-file", {"f": "x"}, ["plan", SCENARIO, "--out", "{tmp}/f"],
     "f: exists and is not a folder"),
    ("trace-out-parent-is-file", {"f": "x"}, ["trace", "--tokens", "10", "--prompts", "1",
                                              "--out", "{tmp}/f/t.npz"],
     "t.npz: cannot write the trace: File exists"),
    # scenario fields, section by section: types, ranges, NaN/inf, enums, unknown fields
    ("models-method-bogus", {"s.yaml": "models: {method: magic}\n"}, ["run", "{tmp}/s.yaml"],
     "models.method: must be one of 'draft_model', 'eagle'"),
    ("models-draft-list", {"s.yaml": "models: {draft: [1]}\n"}, ["run", "{tmp}/s.yaml"],
     "models.draft: input should be a valid string, got [1]"),
    ("models-target-unknown", {"s.yaml": "models: {target: acme-9b}\n"},
     ["run", "{tmp}/s.yaml"], "s.yaml: deployment: unknown model 'acme-9b'"),
    ("weight-bits-3", {"s.yaml": "deployment: {weight_bits: 3}\n"}, ["run", "{tmp}/s.yaml"],
     "deployment.weight_bits: must be one of 4, 8 or 16, got 3"),
    ("kv-bits-4", {"s.yaml": "deployment: {kv_bits: 4}\n"}, ["run", "{tmp}/s.yaml"],
     "deployment.kv_bits: must be one of 8 or 16, got 4"),
    ("compute-dtype-fp6", {"s.yaml": "deployment: {compute_dtype: fp6}\n"},
     ["run", "{tmp}/s.yaml"],
     "deployment.compute_dtype: must be one of 'bf16', 'fp8' or 'fp4'"),
    ("compute-dtype-fp4-16-bit", {"s.yaml": "deployment: {compute_dtype: fp4}\n"},
     ["run", "{tmp}/s.yaml"], "compute_dtype: fp4 (W4A4) needs weight_bits 4, got 16"),
    ("fp4-format-bad", {"s.yaml": "deployment: {weight_bits: 4, fp4_format: fp4}\n"},
     ["run", "{tmp}/s.yaml"],
     "deployment.fp4_format: must be one of 'nvfp4' or 'mxfp4', got 'fp4'"),
    ("fp4-format-8-bit", {"s.yaml": "deployment: {weight_bits: 8, fp4_format: nvfp4}\n"},
     ["run", "{tmp}/s.yaml"], "fp4_format: FP4 weights need weight_bits 4, got 8"),
    ("fp4-compute-on-h100", {"s.yaml": "deployment: {weight_bits: 4, fp4_format: nvfp4, "
                                       "compute_dtype: fp4}\n"},
     ["run", "{tmp}/s.yaml"], "compute_dtype: gpu h100 has no FP4 peak"),
    ("quantized-bad", {"s.yaml": "deployment: {weight_bits: 8, quantized: attention}\n"},
     ["run", "{tmp}/s.yaml"],
     "deployment.quantized: must be one of 'all', 'mlp' or 'experts', got 'attention'"),
    ("quantized-16-bit", {"s.yaml": "deployment: {quantized: mlp}\n"},
     ["run", "{tmp}/s.yaml"], "quantized: mlp names the weights weight_bits quantizes, but "
                              "weight_bits is 16"),
    ("moe-kernel-bad", {"s.yaml": "deployment: {moe_kernel: marlin}\n"},
     ["run", "{tmp}/s.yaml"],
     "deployment.moe_kernel: must be one of 'trtllm_gen', 'deepgemm', 'cutlass' or 'triton', "
     "got 'marlin'"),
    ("moe-kernel-dense", {"s.yaml": "deployment: {moe_kernel: trtllm_gen}\n"},
     ["run", "{tmp}/s.yaml"], "moe_kernel: llama-3-8b has no routed experts"),
    ("offload-word", {"s.yaml": "deployment: {offload_fraction: some}\n"},
     ["run", "{tmp}/s.yaml"], "deployment.offload_fraction"),
    ("gpu-memory-nan", {"s.yaml": "deployment: {gpu_memory_utilization: .nan}\n"},
     ["run", "{tmp}/s.yaml"],
     "deployment.gpu_memory_utilization: input should be a finite number, got nan"),
    ("replicas-zero", {"s.yaml": "deployment: {replicas: 0}\n"}, ["run", "{tmp}/s.yaml"],
     "deployment.replicas: must be >= 1, got 0"),
    ("router-bogus", {"s.yaml": "deployment: {router: random}\n"}, ["run", "{tmp}/s.yaml"],
     "deployment.router: must be one of 'round_robin'"),
    ("timing-bogus", {"s.yaml": "deployment: {timing: exact}\n"}, ["run", "{tmp}/s.yaml"],
     "deployment.timing: must be one of 'auto'"),
    ("framework-release-unknown", {"s.yaml": "deployment: {framework: vllm@99.0}\n"},
     ["run", "{tmp}/s.yaml"], "framework 'vllm@99.0': vllm lists no overheads for version"),
    ("tp-not-dividing-heads", {"s.yaml": "deployment: {tp: 3}\n"}, ["run", "{tmp}/s.yaml"],
     "llama-3-8b: tp 3 does not divide num_attention_heads 32"),
    ("catalog-file-missing", {"s.yaml": "deployment: {catalog: {tmp}/none.yaml}\n"},
     ["run", "{tmp}/s.yaml"], "none.yaml: cannot read catalog file: No such file"),
    ("order-bogus", {"s.yaml": "scheduler: {order: fifo}\n"}, ["run", "{tmp}/s.yaml"],
     "scheduler.order: must be one of 'vllm_v1'"),
    ("release-a-float", {"s.yaml": "scheduler: {vllm_release: 0.2}\n"},
     ["run", "{tmp}/s.yaml"], "scheduler.vllm_release: must be one of '0.33', '0.20' or "
                              "'0.11', got 0.2"),
    ("draft-sync-bogus", {"s.yaml": "scheduler: {draft_sync: never}\n"},
     ["run", "{tmp}/s.yaml"], "scheduler.draft_sync: must be one of"),
    ("block-size-zero", {"s.yaml": "scheduler: {block_size: 0}\n"}, ["run", "{tmp}/s.yaml"],
     "scheduler.block_size: must be >= 1, got 0"),
    ("reserve-isl-word", {"s.yaml": "scheduler: {reserve_full_isl: maybe}\n"},
     ["run", "{tmp}/s.yaml"], "scheduler.reserve_full_isl: input should be a valid boolean"),
    ("scheduler-a-list", {"s.yaml": "scheduler: [1, 2]\n"}, ["run", "{tmp}/s.yaml"],
     "scheduler: input should be a valid dictionary"),
    ("onoff-missing-rate", {"s.yaml": "workload: {arrivals: onoff}\n"},
     ["run", "{tmp}/s.yaml"], "workload.on_rate_per_s: required field is missing"),
    ("closed-loop-think-inf", {"s.yaml": "workload: {arrivals: closed_loop, users: 4, "
                                         "think_mean_s: .inf}\n"},
     ["run", "{tmp}/s.yaml"], "workload.think_mean_s: input should be a finite number"),
    ("trace-format-bogus", {"s.yaml": "workload: {arrivals: trace, format: csv, file: x}\n"},
     ["run", "{tmp}/s.yaml"], "workload.format: must be one of 'mooncake'"),
    ("trace-sample-over-1", {"s.yaml": "workload: {arrivals: trace, format: azure, file: x, "
                                       "sample: 2}\n"},
     ["run", "{tmp}/s.yaml"], "workload.sample: must be <= 1, got 2"),
    ("length-kind-bogus", {"s.yaml": "workload: {output: {kind: zipf}}\n"},
     ["run", "{tmp}/s.yaml"], "workload.output.kind: must be one of 'fixed'"),
    ("iid-theta-zero", {"s.yaml": "acceptance: {kind: iid, alpha: 0.5, theta: 0}\n"},
     ["run", "{tmp}/s.yaml"], "acceptance.theta: must be > 0, got 0"),
    ("acceptance-no-kind", {"s.yaml": "acceptance: {alpha: 0.5}\n"}, ["run", "{tmp}/s.yaml"],
     "acceptance.kind: required, one of 'iid'"),
    ("positional-rate-over-1", {"s.yaml": "acceptance: {kind: positional, "
                                          "rates: [0.5, 1.2]}\n"},
     ["run", "{tmp}/s.yaml"], "acceptance.rates.1: must be <= 1, got 1.2"),
    ("marginals-rising", {"s.yaml": "acceptance: {kind: marginal, marginals: [0.5, 0.9]}\n"},
     ["run", "{tmp}/s.yaml"], "acceptance: marginals[1]: must be <= marginals[0] = 0.5"),
    ("calibrated-beyond-depth", {"s.yaml": "acceptance: {kind: calibrated, mean_tokens: 9, "
                                           "expansion: [1, 1]}\n"},
     ["run", "{tmp}/s.yaml"], "acceptance: mean_tokens: must be in [1, 3] for depth 2"),
    ("task-weight-zero", {"s.yaml": "acceptance: {kind: task_mix, tasks: {a: {weight: 0, "
                                    "acceptance: {kind: iid, alpha: 0.5}}}}\n"},
     ["run", "{tmp}/s.yaml"], "acceptance.tasks.a.weight: must be > 0, got 0"),
    ("task-mix-nested", {"s.yaml": "acceptance: {kind: task_mix, tasks: {a: {weight: 1, "
                                   "acceptance: {kind: task_mix, tasks: {}}}}}\n"},
     ["run", "{tmp}/s.yaml"], "acceptance.tasks.a.acceptance.kind: must be one of"),
    ("variants-a-mapping", {"s.yaml": "variants: {a: 1}\n"}, ["run", "{tmp}/s.yaml"],
     "variants: input should be a valid list"),
    ("variant-name-nul", {"s.yaml": "variants: [{name: \"a\\0b\", policy: {kind: none}}]\n"},
     ["run", "{tmp}/s.yaml"], "variants.0.name: must use only letters, digits"),
    ("fixed-gamma-float", {"s.yaml": "variants: [{name: g, policy: {kind: fixed, "
                                     "gamma: 2.5}}]\n"},
     ["run", "{tmp}/s.yaml"], "variants.0.policy.gamma: input should be a valid integer"),
    ("ladder-rows-overlap", {"s.yaml": "variants: [{name: l, policy: {kind: batch_ladder, "
                                       "ladder: [[1, 100, 4], [50, 200, 2]]}}]\n"},
     ["run", "{tmp}/s.yaml"], "policy.ladder: rows overlap at [50, 200, 2]"),
    ("ladder-first-row-not-1", {"s.yaml": "variants: [{name: l, policy: {kind: batch_ladder, "
                                          "ladder: [[2, 100, 4]]}}]\n"},
     ["run", "{tmp}/s.yaml"], "policy.ladder: the first row must start at batch size 1"),
    ("ladder-gamma-past-k", {"s.yaml": "variants: [{name: l, policy: {kind: batch_ladder, "
                                       "ladder: [[1, 100, 4]], num_speculative_tokens: 3}}]\n"},
     ["run", "{tmp}/s.yaml"],
     "policy.num_speculative_tokens: 3, but the ladder drafts up to 4 tokens"),
    ("ladder-empty", {"s.yaml": "variants: [{name: l, policy: {kind: batch_ladder, "
                                "ladder: []}}]\n"},
     ["run", "{tmp}/s.yaml"], "variants.0.policy.ladder: needs at least 1 item(s), got []"),
    ("sglang-adaptive-slot-key", {"s.yaml": "variants: [{name: a, policy: {kind: "
                                            "sglang_adaptive, slots: {x1: {candidate_steps: "
                                            "[1]}}}}]\n"},
     ["run", "{tmp}/s.yaml"], "variants.0.policy.slots.x1.[key]"),
    ("sglang-adaptive-never", {"s.yaml": "variants: [{name: a, policy: {kind: "
                                         "sglang_adaptive, slots: {'1': {candidate_steps: "
                                         "[0]}}}}]\n"},
     ["run", "{tmp}/s.yaml"], "policy.slots: every candidate_steps is 0"),
    ("trtllm-schedule-first", {"s.yaml": "variants: [{name: t, policy: {kind: trtllm, "
                                         "max_draft_len: 4, draft_len_schedule: {4: 2}}}]\n"},
     ["run", "{tmp}/s.yaml"],
     "policy.draft_len_schedule: the smallest batch size must draft max_draft_len (4)"),
    ("trtllm-threshold", {"s.yaml": "variants: [{name: t, policy: {kind: trtllm, "
                                    "max_draft_len: 4, acceptance_rate_threshold: 1.5}}]\n"},
     ["run", "{tmp}/s.yaml"], "variants.0.policy.acceptance_rate_threshold: must be <= 1"),
    ("trtllm-no-config-file", {}, ["run", "--from-trtllm", "trtllm-serve "
                                   "meta-llama/Llama-3.1-8B-Instruct --config {tmp}/none.yaml"],
     "none.yaml: cannot read TensorRT-LLM config: No such file or directory"),
    ("trtllm-two-models", {}, ["run", "--from-trtllm", "trtllm-serve a b"],
     "--from-trtllm: one MODEL is required, got ['a', 'b']"),
    ("trtllm-and-vllm", {}, ["run", "--from-trtllm", "trtllm-serve a", "--from-vllm",
                             "vllm serve a"], "--from-vllm, --from-trtllm: give one deployment"),
    ("adaptive-smoothing-zero", {"s.yaml": "variants: [{name: a, policy: {kind: adaptive, "
                                           "smoothing: 0}}]\n"},
     ["run", "{tmp}/s.yaml"], "variants.0.policy.smoothing: must be > 0, got 0"),
    ("medusa-heads-too-few", {"s.yaml": "variants: [{name: m, policy: {kind: fixed, "
                                        "gamma: 6}, drafter: {method: medusa, heads: 2}}]\n"},
     ["run", "{tmp}/s.yaml"], "heads: 2 Medusa heads propose at most 2 positions"),
    ("lookup-rate-over-1", {"s.yaml": "variants: [{name: n, policy: {kind: fixed, gamma: 2}, "
                                      "drafter: {method: ngram, proposal_rate: 2}}]\n"},
     ["run", "{tmp}/s.yaml"], "variants.0.drafter.proposal_rate: must be <= 1, got 2"),
    ("seed-2-to-63", {"s.yaml": "run: {seed: 9223372036854775808}\n"}, ["run", "{tmp}/s.yaml"],
     "run.seed: must be < 9223372036854775808"),
    ("slo-with-unit", {"s.yaml": "slo: {tpot_p99_s: 50ms}\n"}, ["run", "{tmp}/s.yaml"],
     "slo.tpot_p99_s: input should be a valid number, got '50ms'"),
    ("slo-unknown-field", {"s.yaml": "slo: {ttft_p50_s: 1}\n"}, ["run", "{tmp}/s.yaml"],
     "slo.ttft_p50_s: unknown field"),
    ("name-null", {"s.yaml": "name: null\n"}, ["run", "{tmp}/s.yaml"],
     "name: input should be a valid string, got None"),
    ("set-into-a-number", {}, ["run", "--set", "run.requests.x=3"],
     "(--set run.requests.x=3): run.requests: input should be a valid integer"),
    ("set-negative-index", {}, ["run", "--set", "variants.-1.name=a"],
     "--set variants.-1.name=a: variants.-1: no such list item"),
    # engine command lines: flags, values, switches, --speculative-config
    ("vllm-quote-unbalanced", {}, ["run", "--from-vllm", "vllm serve meta-llama/Llama-3.1-8B "
                                                         "--max-num-seqs '8"],
     "--from-vllm: cannot split the command line: No closing quotation"),
    ("vllm-flag-twice-spelt-apart", {}, ["run", "--from-vllm", "vllm serve "
                                         "meta-llama/Llama-3.1-8B --max-num-seqs 8 "
                                         "--max_num_seqs 16"],
     "--from-vllm: --max-num-seqs: given twice"),
    ("vllm-flag-no-value", {}, ["run", "--from-vllm", "vllm serve meta-llama/Llama-3.1-8B "
                                                      "--max-num-seqs"],
     "--from-vllm: --max-num-seqs: needs a value"),
    ("vllm-tp-empty", {}, ["run", "--from-vllm", "vllm serve meta-llama/Llama-3.1-8B -tp="],
     "--from-vllm: -tp: must be an integer, got ''"),
    ("vllm-gpu-memory-nan", {}, ["run", "--from-vllm", "vllm serve meta-llama/Llama-3.1-8B "
                                                       "--gpu-memory-utilization nan"],
     "deployment.gpu_memory_utilization: input should be a valid number"),
    ("vllm-model-len-huge", {}, ["run", "--from-vllm", "vllm serve meta-llama/Llama-3.1-8B "
                                                       "--max-model-len 999999G"],
     "scheduler.max_model_len: must be <= 1000000000"),
    ("vllm-kv-dtype-fp4", {}, ["run", "--from-vllm", "vllm serve meta-llama/Llama-3.1-8B "
                                                     "--kv-cache-dtype fp4"],
     "--from-vllm: --kv-cache-dtype: one of auto"),
    ("vllm-quantization-unknown", {}, ["run", "--from-vllm", "vllm serve "
                                       "meta-llama/Llama-3.1-8B --quantization bitsandbytes"],
     "--quantization bitsandbytes: not modelled"),
    ("vllm-two-models", {}, ["run", "--from-vllm", "vllm serve meta-llama/Llama-3.1-8B "
                                                   "meta-llama/Llama-3.1-70B"],
     "--from-vllm: give exactly one model"),
    ("vllm-switch-maybe", {}, ["run", "--from-vllm", "vllm serve meta-llama/Llama-3.1-8B "
                                                     "--enable-chunked-prefill=maybe"],
     "--enable-chunked-prefill: a switch, it takes no value, got "
     "'--enable-chunked-prefill=maybe'"),
    ("vllm-async-with-pp", {}, ["run", "--from-vllm", "vllm serve meta-llama/Llama-3.1-8B "
                                                      "-pp 2 --async-scheduling"],
     "--async-scheduling: vLLM 0.33's V1 model runner does not support it with pipeline"),
    ("vllm-spec-not-object", {}, ["run", "--from-vllm", "vllm serve meta-llama/Llama-3.1-8B "
                                                        "--speculative-config '[1, 2]'"],
     "--speculative-config: must be a JSON object"),
    ("vllm-spec-method-bogus", {}, ["run", "--from-vllm", "vllm serve meta-llama/Llama-3.1-8B "
                                    "--speculative-config '{\"method\": \"lookahead\", "
                                    "\"num_speculative_tokens\": 3}'"],
     "--speculative-config: method: one of draft_model"),
    ("vllm-spec-k-string", {}, ["run", "--from-vllm", "vllm serve meta-llama/Llama-3.1-8B "
                                "--speculative-config '{\"method\": \"eagle3\", "
                                "\"num_speculative_tokens\": \"3\"}'"],
     "num_speculative_tokens: an integer >= 1 is required, got '3'"),
    ("vllm-spec-k-huge", {}, ["run", "--from-vllm", "vllm serve meta-llama/Llama-3.1-8B "
                              "--speculative-config '{\"method\": \"eagle3\", "
                              "\"num_speculative_tokens\": 100000}'"],
     "variants.1.policy.gamma: must be <= 64, got 100000"),
    ("vllm-spec-unknown-key", {}, ["run", "--from-vllm", "vllm serve meta-llama/Llama-3.1-8B "
                                   "--speculative-config '{\"method\": \"eagle3\", "
                                   "\"num_speculative_tokens\": 3, \"foo\": 1}'"],
     "--speculative-config: foo: not modelled"),
    ("vllm-spec-rates-rising", {}, ["run", "--from-vllm", "vllm serve meta-llama/Llama-3.1-8B "
                                    "--speculative-config '{\"method\": \"eagle3\", "
                                    "\"num_speculative_tokens\": 2, \"rejection_sample_method\": "
                                    "\"synthetic\", \"synthetic_acceptance_rates\": [0.5, 0.9]}'"],
     "synthetic_acceptance_rates: must be non-increasing, got [0.5, 0.9]"),
    ("vllm-spec-length-nan", {}, ["run", "--from-vllm", "vllm serve meta-llama/Llama-3.1-8B "
                                  "--speculative-config '{\"method\": \"eagle3\", "
                                  "\"num_speculative_tokens\": 2, \"rejection_sample_method\": "
                                  "\"synthetic\", \"synthetic_acceptance_length\": NaN}'"],
     "synthetic_acceptance_length: a number in [1, 3] (num_speculative_tokens + 1), got nan"),
    ("vllm-tree-node-count", {}, ["run", "--from-vllm", "vllm serve meta-llama/Llama-3.1-8B "
                                  "--speculative-config '{\"method\": \"eagle\", "
                                  "\"num_speculative_tokens\": 3, \"speculative_token_tree\": "
                                  "\"[(0,), (1,)]\"}'"],
     "num_speculative_tokens: 3, but speculative_token_tree has 2 nodes"),
    ("sglang-not-sglang", {}, ["run", "--from-sglang", "vllm serve x"],
     "--from-sglang: must start with 'python3 -m sglang.launch_server'"),
    ("sglang-tp-word", {}, ["run", "--from-sglang", "python -m sglang.launch_server "
                            "--model-path meta-llama/Llama-3.1-8B --tp-size two"],
     "--from-sglang: --tp-size: must be an integer, got 'two'"),
    ("sglang-memory-inf", {}, ["run", "--from-sglang", "python -m sglang.launch_server "
                               "--model-path meta-llama/Llama-3.1-8B --mem-fraction-static inf"],
     "deployment.gpu_memory_utilization: input should be a valid number"),
    ("sglang-algorithm-bogus", {}, ["run", "--from-sglang", "python -m sglang.launch_server "
                                    "--model-path meta-llama/Llama-3.1-8B "
                                    "--speculative-algorithm MAGIC"],
     "--speculative-algorithm: one of STANDALONE, EAGLE, EAGLE3, NEXTN, NGRAM, DFLASH"),
    ("bench-ratio-one", {}, ["run", "--bench", "vllm bench serve --random-range-ratio 1"],
     "--bench: --random-range-ratio: must be in [0, 1), got 1"),
    ("bench-prompts-huge", {}, ["run", "--bench", "vllm bench serve --num-prompts 1000000000000"],
     "run.requests: must be <= 100000000"),
    ("bench-concurrency-and-rate", {}, ["run", "--bench", "vllm bench serve --request-rate 4 "
                                                          "--max-concurrency 8"],
     "--max-concurrency with a finite --request-rate: not modelled"),
    # flags of the other commands
    ("grid-alpha-nan", {}, ["grid", "--target", "llama-3-8b", "--draft", "llama-3.2-1b",
                            "--gpu", "h100", "--alpha", "nan"],
     "--alpha: must be in [0, 1], got nan"),
    ("grid-batches-words", {}, ["grid", "--target", "llama-3-8b", "--draft", "llama-3.2-1b",
                                "--gpu", "h100", "--alpha", "0.8", "--batches", "a,b"],
     "--batches: must be comma-separated integers, got 'a,b'"),
    ("grid-cells-huge", {}, ["grid", "--target", "llama-3-8b", "--draft", "llama-3.2-1b",
                             "--gpu", "h100", "--alpha", "0.8",
                             "--batches", ",".join(map(str, range(1, 5001))),
                             "--contexts", ",".join(map(str, range(1, 5001)))],
     "--batches/--contexts: the grid has 25000000 cells; at most 10000"),
    ("speedup-c-inf", {}, ["speedup", "--alpha", "0.8", "--c", "inf"],
     "speedup: error: --c: must be finite and >= 0, got inf"),  # the flag, as typed
    ("speedup-alpha-above-1", {}, ["speedup", "--alpha", "2", "--c", "0.1"],
     "speedup: error: --alpha: must be in [0, 1], got 2.0"),
    ("speedup-tokens-per-verify-nan", {}, ["speedup", "--target", "llama-3-8b", "--draft",
                                           "llama-3.2-1b", "--gpu", "h100", "--batch", "1",
                                           "--context", "128", "--tree", "k,1", "--widths",
                                           "1", "--tokens-per-verify", "nan"],
     "--tokens-per-verify: a verify of a depth-2 tree yields 1..3 tokens, got nan"),
    ("speedup-context-too-long", {}, ["speedup", "--target", "llama-3-8b", "--draft",
                                      "llama-3.2-1b", "--gpu", "h100", "--batch", "1",
                                      "--context", "9999999", "--alpha", "0.8"],
     "positions exceed max_position_embeddings 8192"),
    ("speedup-vocab-mismatch", {}, ["speedup", "--target", "llama-3-8b", "--draft",
                                    "llama-2-7b", "--gpu", "h100", "--batch", "1",
                                    "--context", "128", "--alpha", "0.8"],
     "draft vocab_size 32000, target vocab_size 128256"),
    ("step-offload-nan", {}, ["hw", "step", "--model", "llama-3-8b", "--gpu", "h100",
                              "--batch", "1", "--context", "128", "--offload", "nan"],
     "--offload: must be a fraction in [0, 1], got nan"),
    ("step-link-unknown", {}, ["hw", "step", "--model", "llama-3-8b", "--gpu", "h100",
                               "--batch", "1", "--context", "128", "--tp", "2",
                               "--tp-link", "carrier-pigeon"],
     "unknown link 'carrier-pigeon'"),
    ("step-tree-huge", {}, ["hw", "step", "--model", "llama-3-8b", "--gpu", "h100",
                            "--batch", "1", "--context", "128", "--tree", "64,64,64"],
     "--tree: the tree <64,64,64> has more than 4096 nodes"),
    ("config-json-hidden-nan", {"config.json": '{"model_type": "llama", "hidden_size": NaN, '
                                               '"intermediate_size": 14336, '
                                               '"num_hidden_layers": 32, '
                                               '"num_attention_heads": 32, '
                                               '"vocab_size": 32000, '
                                               '"max_position_embeddings": 8192}'},
     ["hw", "step", "--model", "{tmp}/config.json", "--gpu", "h100", "--batch", "1",
      "--context", "1"], "config.json: hidden_size: Input should be a finite number"),
    ("config-json-a-list", {"config.json": "[1, 2]"},
     ["hw", "step", "--model", "{tmp}/config.json", "--gpu", "h100", "--batch", "1",
      "--context", "1"], "config.json: must be a JSON object"),
    ("trace-sigma-inf", {}, ["trace", "--sigma", "inf"], "--sigma: must be finite and >= 0"),
    ("trace-out-not-npz", {}, ["trace", "--out", "{tmp}/x.txt"],
     "--out: trace files end in .npz"),
    ("validate-by-twice", {}, ["validate", "--by", "gpu,gpu"],
     "--by: a field is given twice, got 'gpu,gpu'"),
    ("validate-by-unknown", {}, ["validate", "--by", "colour"],
     "--by: 'colour' is not a row field to group on"),
    ("sweep-same-seed-and-seed-axis", {}, ["sweep", SCENARIO, "--vary", "run.seed=1,2",
                                           "--same-seed"],
     "--same-seed: run.seed is an axis"),  # the axis's seeds won, silently
    # an empty path is refused as itself (it read the working directory: "Is a directory",
    # and an empty catalog field was taken as none)
    ("catalog-field-empty", {}, ["run", "--set", "deployment.catalog=''"],
     "deployment.catalog: string should have at least 1 character"),
    ("calibrate-nothing", {}, ["calibrate"],
     "give a measurements CSV or --tables GPU (one of the two)"),
    # --out is checked before the fit (it was after it, seconds of work later)
    ("calibrate-out-folder", {}, ["calibrate", "--tables", "h100", "--out", "{tmp}"],
     ": is a folder; give the catalog file to write"),
    ("calibrate-out-under-a-file", {"f": ""},
     ["calibrate", "--tables", "h100", "--out", "{tmp}/f/c.yaml"],
     "/f/c.yaml: cannot write the catalog there"),
    ("bench-requests-huge", {}, ["bench", "--requests", "1000000000000"],
     "--requests: must be in 1..1e+08"),
    ("plan-rel-tol-nan", {}, ["plan", SCENARIO, "--rel-tol", "nan"],
     "--rel-tol: must be in (0, 1), got nan"),
    ("plan-slo-p0", {}, ["plan", SCENARIO, "--slo", "ttft_p0=1s"],
     "--slo ttft_p0=1s: 'ttft_p0=1s' must look like ttft_p99=2s"),
    ("plan-candidates-unknown-key", {"c.yaml": "candidates: [{name: a, colour: red, "
                                               "policy: {kind: none}}]\n"},
     ["plan", SCENARIO, "--candidates", "{tmp}/c.yaml"],
     "c.yaml: candidates.0: needs name, optional set, policy"),
    ("plan-candidates-dots", {"c.yaml": "candidates: [{name: '..', policy: {kind: none}}]\n"},
     ["plan", SCENARIO, "--candidates", "{tmp}/c.yaml"],
     "variants.0.name: must use only letters, digits and _ . = -, not dots alone"),
    ("sweep-workers-zero", {}, ["sweep", SCENARIO, "--vary", "run.seed=1,2", "--workers", "0"],
     "--workers: must be in 1..256, got 0"),
    # corrupt traces, CSVs and dumps
    ("replay-time-nan", {"r.csv": "arrival_at,prompt_tokens,output_tokens\nnan,10,5\n0,10,5\n",
                         "s.yaml": "workload: {arrivals: replay, file: {tmp}/r.csv}\n"
                                   "run: {requests: 2}\n"},
     ["run", "{tmp}/s.yaml"], "r.csv: line 2: column 'arrival_at': not finite: 'nan'"),
    ("replay-time-backwards", {"r.csv": "arrival_at,prompt_tokens,output_tokens\n5,10,5\n"
                                        "1,10,5\n",
                               "s.yaml": "workload: {arrivals: replay, file: {tmp}/r.csv}\n"
                                         "run: {requests: 2}\n"},
     ["run", "{tmp}/s.yaml"], "r.csv: line 3: column 'arrival_at': times must not decrease"),
    ("replay-truncated-line", {"r.csv": "arrival_at,prompt_tokens,output_tokens\n0,10,5\n"
                                        "1,10\n",
                               "s.yaml": "workload: {arrivals: replay, file: {tmp}/r.csv}\n"
                                         "run: {requests: 2}\n"},
     ["run", "{tmp}/s.yaml"], "r.csv: line 3: column 'output_tokens': missing value"),
    ("replay-not-utf8", {"r.csv": "arrival_at,prompt_tokens,output_tokens\n0,10,5\n\udcff\n",
                         "s.yaml": "workload: {arrivals: replay, file: {tmp}/r.csv}\n"},
     ["run", "{tmp}/s.yaml"], "r.csv: cannot read: not UTF-8 text"),
    ("azure-time-word", {"a.csv": "TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,10,5\n",
                         "s.yaml": "workload: {arrivals: trace, format: azure, "
                                   "file: {tmp}/a.csv}\n"},
     ["run", "{tmp}/s.yaml"], "a.csv: line 2: TIMESTAMP: not a time like"),
    ("mooncake-truncated", {"m.jsonl": "{\"timestamp\": 0, \"input_length\": 100, "
                                       "\"output_length\": 10, \"hash_ids\": [0]}\n"
                                       "{\"timestamp\": 1, \"input_len",
                            "s.yaml": "workload: {arrivals: trace, format: mooncake, "
                                      "file: {tmp}/m.jsonl}\n"},
     ["run", "{tmp}/s.yaml"], "m.jsonl: line 2: not valid JSON: Unterminated string"),
    ("mooncake-hash-ids-huge", {"m.jsonl": "{\"timestamp\": 0, \"input_length\": 100, "
                                           "\"output_length\": 10, \"hash_ids\": ["
                                           + ",".join(["1"] * 100000) + "]}\n",
                                "s.yaml": "workload: {arrivals: trace, format: mooncake, "
                                          "file: {tmp}/m.jsonl}\n"},
     ["run", "{tmp}/s.yaml"], "m.jsonl: line 1: hash_ids: 100000 ids for input_length 100"),
    ("sharegpt-tokens-negative", {"g.json": "[{\"conversations\": [{\"from\": \"human\", "
                                            "\"value\": \"x\", \"num_tokens\": -3}, "
                                            "{\"from\": \"gpt\", \"value\": \"y\"}]}]",
                                  "s.yaml": "workload: {arrivals: trace, format: sharegpt, "
                                            "file: {tmp}/g.json, rate_per_s: 1}\n"},
     ["run", "{tmp}/s.yaml"], "g.json: line 1: conversations[0].num_tokens: must be >= 0"),
    ("sharegpt-key-twice", {"g.json": "[{\"conversations\": [{\"from\": \"human\", "
                                      "\"value\": \"x\", \"value\": \"xx\"}, "
                                      "{\"from\": \"gpt\", \"value\": \"y\"}]}]",
                            "s.yaml": "workload: {arrivals: trace, format: sharegpt, "
                                      "file: {tmp}/g.json, rate_per_s: 1}\n"},
     ["run", "{tmp}/s.yaml"], "g.json: line 1: value: given twice"),  # the last was kept
    ("metrics-not-utf8", {"m.prom": "\udcff", "s.yaml": "acceptance: {kind: vllm_metrics, "
                                                        "file: {tmp}/m.prom}\n"},
     ["run", "{tmp}/s.yaml"], "m.prom: not a UTF-8 text file"),
    ("metrics-value-word", {"m.prom": "vllm:spec_decode_num_drafts_total{model_name=\"m\"} "
                                      "sixty\n",
                            "s.yaml": "acceptance: {kind: vllm_metrics, file: {tmp}/m.prom}\n"},
     ["run", "{tmp}/s.yaml"], "m.prom: line 1: vllm:spec_decode_num_drafts_total: value is "
                              "not a number"),
    ("trace-npz-empty", {"t.npz": "", "s.yaml": "acceptance: {kind: trace, file: {tmp}/t.npz}\n"},
     ["run", "{tmp}/s.yaml"], "t.npz: not a valid trace file"),
    ("empirical-nan", {"l.csv": "n\n5\nnan\n", "s.yaml": "workload: {prompt: {kind: "
                       "empirical, file: {tmp}/l.csv, column: n}}\n"},
     ["run", "{tmp}/s.yaml"], "l.csv: line 3: column 'n': not an integer: 'nan'"),
    ("calibrate-measured-nan", {"m.csv": CALIBRATE_HEADER + "\n"
                                + CALIBRATE_ROW.replace("0.01", "nan") + "\n"},
     ["calibrate", "{tmp}/m.csv"], "m.csv: line 2: measured_s: must be > 0, got nan"),
    # GEMM dimensions past the measured tables' 32-bit integers: an OverflowError traceback
    ("catalog-hidden-huge", {"c.yaml": "models: {big: {source: x, config: {model_type: llama, "
                                       "hidden_size: 1000000000000, intermediate_size: 14336, "
                                       "num_hidden_layers: 32, num_attention_heads: 32, "
                                       "vocab_size: 32000, max_position_embeddings: 8192}}}\n"},
     ["hw", "step", "--model", "big", "--gpu", "h100", "--batch", "1", "--context", "1",
      "--catalog", "{tmp}/c.yaml"],
     "c.yaml: models.big.config.hidden_size: Input should be less than or equal to 1048576"),
    ("config-json-heads-huge", {"config.json": '{"model_type": "llama", "hidden_size": 4096, '
                                               '"intermediate_size": 14336, '
                                               '"num_hidden_layers": 32, '
                                               '"num_attention_heads": 1000000000000, '
                                               '"head_dim": 128, "vocab_size": 32000, '
                                               '"max_position_embeddings": 8192}'},
     ["hw", "step", "--model", "{tmp}/config.json", "--gpu", "h100", "--batch", "1",
      "--context", "1"],
     "config.json: num_attention_heads: Input should be less than or equal to 16384"),
    # a catalog number that is inf: bounds like ge=0 let it through
    ("catalog-overhead-inf", {"c.yaml": "gpus: {h100: {overhead_s: .inf}}\n"},
     ["hw", "step", "--model", "llama-3-8b", "--gpu", "h100", "--batch", "1", "--context",
      "128", "--timing", "paper", "--catalog", "{tmp}/c.yaml"],
     "c.yaml: gpus.h100.overhead_s: Input should be a finite number, got inf"),
    ("catalog-link-latency-inf", {"c.yaml": "links: {l9: {name: L9, bytes_per_s: 1.0e+9, "
                                            "latency_s: .inf, source: x}}\n"},
     ["hw", "list", "--catalog", "{tmp}/c.yaml"],
     "c.yaml: links.l9.latency_s: Input should be a finite number, got inf"),
    # a key given twice in a catalog: PyYAML kept the last one, silently
    ("catalog-section-twice", {"c.yaml": "gpus: {h100: {hbm_capacity_gib: 80}}\ngpus: {}\n"},
     ["hw", "list", "--catalog", "{tmp}/c.yaml"],
     "c.yaml: line 2: key 'gpus' given twice in one mapping"),
    ("catalog-field-twice", {"c.yaml": "gpus:\n  h100:\n    overhead_s: 0.001\n"
                                       "    overhead_s: 0.002\n",
                             "s.yaml": "deployment: {catalog: {tmp}/c.yaml}\n"},
     ["run", "{tmp}/s.yaml"], "c.yaml: line 4: key 'overhead_s' given twice in one mapping"),
    # a JSON key given twice: json keeps the last one, silently
    ("vllm-spec-key-twice", {}, ["run", "--from-vllm", "vllm serve meta-llama/Llama-3.1-8B "
                                 "--speculative-config '{\"method\": \"eagle\", \"method\": "
                                 "\"eagle3\", \"num_speculative_tokens\": 3}'"],
     "--from-vllm: --speculative-config: method: given twice"),
    ("config-json-key-twice", {"config.json": '{"model_type": "llama", "hidden_size": 4096, '
                                              '"hidden_size": 8192, '
                                              '"intermediate_size": 14336, '
                                              '"num_hidden_layers": 32, '
                                              '"num_attention_heads": 32, '
                                              '"vocab_size": 32000, '
                                              '"max_position_embeddings": 8192}'},
     ["hw", "step", "--model", "{tmp}/config.json", "--gpu", "h100", "--batch", "1",
      "--context", "1"], "config.json: hidden_size: given twice"),
    ("mooncake-key-twice", {"m.jsonl": "{\"timestamp\": 0, \"timestamp\": 5, "
                                       "\"input_length\": 100, \"output_length\": 10, "
                                       "\"hash_ids\": [0]}\n",
                            "s.yaml": "workload: {arrivals: trace, format: mooncake, "
                                      "file: {tmp}/m.jsonl}\nrun: {requests: 1}\n"},
     ["run", "{tmp}/s.yaml"], "m.jsonl: line 1: timestamp: given twice"),
    # a vLLM metrics dump: a series twice was summed, an infinite counter taken
    ("metrics-series-twice", {"m.prom": "vllm:spec_decode_num_drafts_total{model_name=\"m\"} "
                                        "60.0\nvllm:spec_decode_num_drafts_total"
                                        "{model_name=\"m\"} 10.0\n",
                              "s.yaml": "acceptance: {kind: vllm_metrics, file: {tmp}/m.prom}\n"},
     ["run", "{tmp}/s.yaml"],
     "m.prom: line 2: vllm:spec_decode_num_drafts_total: the same series as line 1"),
    ("metrics-counter-inf", {"m.prom": "vllm:spec_decode_num_drafts_total{model_name=\"m\"} "
                                       "+Inf\n",
                             "s.yaml": "acceptance: {kind: vllm_metrics, file: {tmp}/m.prom}\n"},
     ["run", "{tmp}/s.yaml"], "m.prom: line 1: vllm:spec_decode_num_drafts_total: a counter, "
                              "must be a finite number >= 0, got inf"),
]

