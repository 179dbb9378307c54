"""PIndicQA (issue 13): taxonomy, label combinations, generation checks, correction and release stages, the job's phases and figures."""
