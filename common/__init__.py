"""Code the lessons share (the d2l idea: notebooks tell the story, one library holds
what several lessons reuse).

- `launch`: run a command from a notebook; the cell fails when the command fails
  (every lesson).
- `distributed`: device and backend choice, rank-prefixed logging, the torchrun
  check (every lesson script).
- `cli`: argument parsing that answers bad input with one line (every lesson script).
- `data`, `models`: the seeded synthetic dataset and the models trained on it
  (00_intro onwards).
- `source`: show code in a notebook, read from the script files at run time.
- `build`: execute every notebook and render the course to `build/`.

What a lesson is *about* (the DDP setup, the trainer) stays in the lesson's own
script, where the learner reads it.
"""
