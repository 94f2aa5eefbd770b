"""Builds the tiled-still tests' scene (run with the bpy wheel, not imported):
    python -I scenes/build_still.py OUT.blend W H SAMPLES DENOISE [PNG8|PNG16|EXR] [passes]
A textured sphere and cube on a plane, lit by a sun and the world, so every tile has edges;
`passes`: its view layer renders Depth and Normal too."""

import sys

import bpy

out, width, height, samples, denoise = sys.argv[1], *map(int, sys.argv[2:6])
file_format = sys.argv[6] if len(sys.argv) > 6 else "PNG8"
bpy.ops.wm.read_factory_settings(use_empty=True)
scene = bpy.context.scene
scene.render.engine = "CYCLES"
scene.render.resolution_x, scene.render.resolution_y = width, height
scene.render.resolution_percentage = 100
scene.frame_start = scene.frame_end = 9
scene.cycles.samples = samples
scene.cycles.use_denoising = bool(denoise)
scene.cycles.device = "CPU"
scene.cycles.seed = 7
image = scene.render.image_settings
image.file_format = "OPEN_EXR" if file_format == "EXR" else "PNG"
image.color_mode = "RGBA"
image.color_depth = {"PNG8": "8", "PNG16": "16", "EXR": "32"}[file_format]
world = bpy.data.worlds.new("World")
scene.world = world
world.color = (0.3, 0.4, 0.6)
if sys.argv[7:8] == ["passes"]:
    layer = scene.view_layers[0]
    layer.use_pass_z = layer.use_pass_normal = True
bpy.ops.mesh.primitive_plane_add(size=8, location=(0, 0, -1))
bpy.ops.mesh.primitive_uv_sphere_add(radius=0.8, location=(-0.8, 0, 0))
bpy.ops.mesh.primitive_cube_add(size=1.0, location=(1.0, 0.5, -0.3), rotation=(0.3, 0.2, 0.7))
for i, obj in enumerate(o for o in scene.objects if o.type == "MESH"):
    mat = bpy.data.materials.new(f"m{i}")
    mat.use_nodes = True
    nodes = mat.node_tree.nodes
    checker = nodes.new("ShaderNodeTexChecker")
    checker.inputs["Scale"].default_value = 6.0 + i
    mat.node_tree.links.new(checker.outputs["Color"], nodes["Principled BSDF"].inputs["Base Color"])
    obj.data.materials.append(mat)
bpy.ops.object.camera_add(location=(0, -5, 1), rotation=(1.35, 0, 0))
scene.camera = bpy.context.object
bpy.ops.object.light_add(type="SUN", location=(0, -3, 3), rotation=(0.6, 0.2, 0))
bpy.ops.wm.save_as_mainfile(filepath=out, compress=False)
