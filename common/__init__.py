"""Code the lessons share (the d2l idea: notebooks tell the story, one library holds
what several lessons reuse).

- `launch`: run a command from a notebook; the cell fails when the command fails
  (every lesson).
- `distributed`: device and backend choice, rank-prefixed logging, the torchrun
  check, and `end_process`, the exit of every script that joins a process group
  (every lesson script; why: 02_multigpu).
- `ports`: ports for the servers a lesson starts, which no two users can share (02
  onwards, and `launch`'s `{port}`).
- `cli`: argument parsing that answers bad input with one line (every lesson script).
- `data`, `models`: the seeded synthetic dataset and the models trained on it
  (00_intro onwards).
- `source`: show code in a notebook, read from the script files at run time.
- `processes`: find and kill every process a command started (for `launch`).
- `snapshot`: atomic snapshot writes, one-line errors for bad files (03, 04, 05).
- `ring`, `ring_sim`, `viz`: the ring all-reduce, real and simulated, and its
  figures (01_theory).
- `slurm`, `netns`: a two-node Slurm cluster and two hosts in network namespaces,
  both on this machine (04_multinode).
- `setup_check`: can this machine run the course? (before 00_intro).
- `system_packages`: the one command that installs Debian packages (Slurm, chromium)
  for the root-only parts; nothing else installs them.
- `build`: execute every notebook and render the course to `build/`.

What a lesson is *about* (the DDP setup, the trainer) stays in the lesson's own
script, where the learner reads it.
"""
