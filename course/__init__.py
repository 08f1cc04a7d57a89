"""The course's own machinery: what runs the course, as opposed to what it teaches.

The subject is in the lesson folders and in `common/` (what lesson scripts share, and
what a learner is sent to read). This package is what a learner may use but need not
read, and `common/` never imports it:

- `build`, `site`, `slides`, `browser_check`: execute every notebook, build the course
  site (Sphinx, settings in `site_config/`) and the slide decks in `build/`, then open
  every page in Debian's headless chromium, driven by Playwright.
- `setup_check`: can this machine run the course? (before 00_intro).
- `exercises`: the coding exercises' checks (`exercises.check(lesson, name)`).
- `system_packages`: the one command that installs the Debian packages of the
  root-only parts (Slurm, munge, chromium), with `apt`; nothing else installs them.
- `cluster`: the local stand-ins for a cluster used by 04_multinode: a two-node Slurm
  cluster and two hosts in network namespaces.
- `lessons`: where the course is and its notebooks (for `build`, `site`, `slides`);
  `speaker_notes`: the instructor's notes beside each notebook, read by `slides`.
"""
