"""The pure core: what a job is and how it moves, with no I/O. The job spec and its validation,
chunk plans, the pipeline table (job kinds, phases, states), costs and prices, the store's key
layout, limits, version rules, webhook payloads and the status report. Everything above imports
from here; nothing here imports anything of the farm outside this folder."""
