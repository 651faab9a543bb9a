"""The examples each ``posx`` command shows under its ``--help`` (rich markup: ``[dim]`` comments)."""

TRAIN_EPILOG = """[bold]Examples[/]

  posx train                                      [dim]# RoPE GPT on the built-in corpus[/]
  posx train pos=absolute train.context_length=64 [dim]# Hydra overrides[/]
  posx train experiment=quick                     [dim]# a smoke run in seconds[/]
  posx train -m pos=absolute,rope seed=0,1,2      [dim]# a sweep into results/sweeps/<time>/[/]
  posx train -m pos=absolute,rope hydra/launcher=joblib   [dim]# jobs in parallel[/]
  posx train --cfg job                            [dim]# print the composed config[/]
  posx train --resume results/runs/<name>         [dim]# continue a stopped or killed run[/]
  torchrun --standalone --nproc_per_node=8 -m posx train experiment=gpu_small   [dim]# one run, 8 GPUs[/]
  posx train -m experiment=gpu_small hydra/launcher=submitit_slurm hydra.launcher.tasks_per_node=4 \\
    hydra.launcher.gpus_per_node=4                [dim]# SLURM jobs of 4 GPUs each[/]
"""

EXTEND_EPILOG = """[bold]Examples[/]

  posx extend results/runs/base method=yarn factor=4      [dim]# YaRN to 4x T, 200 steps[/]
  posx extend base method=abf eval.abf.new_base=1e6 extend.steps=400
  posx extend base method=pi factor=2 eval.after_train=true
  posx extend base -m method=pi,yarn,abf factor=2,4       [dim]# a sweep into results/sweeps/<time>/[/]
  posx extend results/runs/absolute-... method=interpolate factor=2   [dim]# learned absolute[/]
  posx extend base method=pi factor=2 --cfg job           [dim]# print the config that will run[/]
"""

EXPORT_EPILOG = """[bold]Examples[/]

  posx export results/runs/<name> --out exported/<name>   [dim]# a LlamaForCausalLM directory[/]
  posx eval-extrapolate exported/<name>                   [dim]# evaluated through transformers[/]
"""

EVAL_EPILOG = """[bold]Examples[/]

  posx eval-extrapolate --latest                          [dim]# the most recent run[/]
  posx eval-extrapolate results/runs/rope-T128-s0-...     [dim]# a run by path (or by name)[/]
  posx eval-extrapolate --latest eval.methods=\\[none,yarn] eval.factors=\\[1,4]
  posx eval-extrapolate --latest eval.tokens=65536 device=cpu
  posx eval-extrapolate exported/<name>                   [dim]# a local transformers checkpoint[/]
  posx eval-extrapolate --latest --force                  [dim]# evaluate again with the same settings[/]

Settings start from the run's own (its last evaluation, else the config it trained with);
overrides apply on top. Each evaluation is kept under RUN/eval/<id>/, the current one also at
RUN's top level; the same settings again show the stored tables unless --force.
"""

FREQ_EPILOG = """[bold]Examples[/]

  posx frequencies                                        [dim]# the default model: head_dim 32, T=128, s=8[/]
  posx frequencies results/runs/rope-T128-s0-...          [dim]# head_dim, base and T of a run[/]
  posx frequencies --head-dim 64 --context 128 --factor 4 --methods none,pi,ntk,yarn
  posx frequencies --out results/freq.png eval.llama3.high_freq_factor=8
"""

REPORT_EPILOG = """[bold]Examples[/]

  posx report                                          [dim]# every run and every sweep's runs under results/[/]
  posx report results/runs/rope-T128-s0-... results/runs/absolute-T128-s0-...
  posx report results/sweeps/2025-01-01_12-00-00      [dim]# every run of a sweep[/]
  posx report results/runs --out results/reports/all  [dim]# every single run[/]
  posx report results/sweeps/... --factor 4            [dim]# per-position curves at 4x[/]
  posx report results/runs --evaluations all           [dim]# every kept evaluation of each run[/]
  posx report --where T=128 --where model.block=llama  [dim]# only the runs with these settings[/]
  posx report --median-over-groups                     [dim]# also the median over unlike groups[/]
"""

RUNS_EPILOG = """[bold]Examples[/]

  posx runs                                   [dim]# every run under results/[/]
  posx runs results/sweeps/2025-01-01_12-00-00
  posx runs --csv runs.csv                    [dim]# also write the list as CSV[/]
  posx runs --csv -                           [dim]# CSV on stdout instead of the table[/]
"""

COMPARE_EPILOG = """[bold]Examples[/]

  posx compare rope-T128-s0-... absolute-T128-s0-...   [dim]# names under results/runs, or paths[/]
  posx compare base base-yarn-x4 --csv cmp.csv
  posx compare results/runs/* --where pos.name=rope    [dim]# only the RoPE runs among them[/]
"""

PREPARE_EPILOG = """[bold]Examples[/]

  posx data prepare                                        [dim]# the built-in corpus, bytes[/]
  posx data prepare data=text data.path='corpus/**/*.txt' data.tokenizer=bpe data.vocab_size=8192
  posx data prepare data=datasets data.name=json data.data_files=pg19_sample.jsonl
  posx data prepare data.tokenizer=path/to/tokenizer.json
"""
