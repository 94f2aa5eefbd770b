"""Video in and out: ffprobe (probe), reading a master (master, transcode_spec), ffmpeg filter
graphs for segments and transcodes (ffgraph, transcode_graph) and the MP4 joiner that stitches
segments by stream copy (join, mp4box, mp4track, mp4join). Programs run only through
farm.adapters.proc."""
