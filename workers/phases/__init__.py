"""The phases a chunk goes through, one module each: render (with frames, scene_tree, source,
thumbnail, autochunk), segment, transcode, stitch and transcode_stitch (with s3join), and the
splitter that cuts a job into chunks."""
