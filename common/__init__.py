"""Code the lessons share (the d2l idea: notebooks tell the story, one library holds
what several lessons reuse).

- `launch`: run a command from a notebook; the cell fails when the command fails
  (every lesson); `command_line`: what a launch's command says (its Python, its
  process count); `output`: what it prints, as plain text, shown line by line.
- `distributed`: device and backend choice, rank-prefixed logging, the torchrun
  check, and `end_process`, the exit of every script that joins a process group
  (every lesson script; why: 02_multigpu).
- `ports`: a free port for the servers a lesson starts, below the ephemeral range (02
  onwards, and `launch`'s `{port}`); `port_locks`: a lock file per port, so that tests
  and notebooks side by side never pick the same one.
- `cli`: argument parsing that answers bad input with one line (every lesson script).
- `data`, `models`: the seeded synthetic dataset and the models trained on it
  (00_intro onwards).
- `source`: show code in a notebook, read from the script files at run time.
- `processes`: find and kill every process a command started (for `launch`).
- `snapshot`: atomic snapshot writes, one-line errors for bad files (03, 04, 05).
- `random_state`: every rank's random generators, gathered for a snapshot and given
  back to each rank on resume (03, 04, 05).
- `ring`, `ring_sim`, `viz`: the ring all-reduce, real and simulated, and its
  figures (01_theory).
- `listening`: what a running job listens on, read from its processes (04_multinode;
  the set-up check's network note).
- `notebook_device`: one device for a whole notebook, GPUs or the CPU, never some of
  each (every lesson notebook), whose figures `figure_text` describes in words (alt
  text); `versions`: a line that needs a newer PyTorch says so.
- `replicas`: how far apart the ranks' copies of a tensor are (02); `traffic`: the
  bytes handed to `all_reduce` (02's DDP options).
- `ring_stepper`: the interactive ring (01_theory; the alpha-beta model of its part 2
  lives in the lesson's folder, since no other lesson uses it).
- `preemption`: stopping when the cluster asks (03 part 3, 04, 05).
- `parts`: a part of a notebook that needs what a machine may lack, skipped saying why
  (04). Looking inside a hung job (04, part 2) is lesson 04's own: `04_multinode/hangs/`.

What a lesson is *about* (the DDP setup, the trainer) stays in the lesson's own
script, where the learner reads it. The course's own machinery (building the site,
exercise checks, the local Slurm cluster and network namespaces, installing system
packages) is the `course` package; nothing here imports it.
"""
