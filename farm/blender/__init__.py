"""Blender: the .blend reader that needs no Blender (blendfile), the scene's files traced and
stored by content (assets), the child script Blender runs on a worker (script) and the command
line that starts it (command)."""
