"""Builds scenes/textured.blend: a scene whose own settings and files are the job.

Saved with frames 11-35, 25 fps, 320x240 at 100%, Cycles at 4 samples, a camera; an image texture at
//tex/checker.png (orange and teal squares) and a prop linked from //lib/prop.blend. Run with the
oldest Blender the farm supports, so every newer Blender opens the files:
    blender --background --factory-startup --python scenes/build_textured.py -- scenes/textured.blend
Writes tex/checker.png and lib/prop.blend beside the scene; the .blend files are zstd-compressed.
"""

import os
import sys

import bpy

out = os.path.abspath(sys.argv[sys.argv.index("--") + 1] if "--" in sys.argv else "textured.blend")
root = os.path.dirname(out)
os.makedirs(os.path.join(root, "tex"), exist_ok=True)
os.makedirs(os.path.join(root, "lib"), exist_ok=True)

ORANGE = (240, 120, 20)
TEAL = (20, 150, 150)
SIDE, SQUARE = 64, 16


def srgb_to_linear(c):
    c /= 255.0
    return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4


def emission_material(name, rgb_linear=None, image=None):
    """Emission only, so the rendered colour is the texture's colour under the Standard view."""
    mat = bpy.data.materials.new(name)
    mat.use_nodes = True
    nodes, links = mat.node_tree.nodes, mat.node_tree.links
    nodes.clear()
    emit = nodes.new("ShaderNodeEmission")
    output = nodes.new("ShaderNodeOutputMaterial")
    links.new(emit.outputs["Emission"], output.inputs["Surface"])
    if image is not None:
        tex = nodes.new("ShaderNodeTexImage")
        tex.image = image
        tex.interpolation = "Closest"
        links.new(tex.outputs["Color"], emit.inputs["Color"])
    else:
        emit.inputs["Color"].default_value = (*rgb_linear, 1.0)
    return mat


# ── tex/checker.png: large squares of two colours, tiny as a PNG ────────────────────────────────
bpy.ops.wm.read_factory_settings(use_empty=True)
checker = bpy.data.images.new("checker", SIDE, SIDE, alpha=False)
pixels = []
for y in range(SIDE):
    for x in range(SIDE):
        rgb = ORANGE if (x // SQUARE + y // SQUARE) % 2 == 0 else TEAL
        pixels += [c / 255.0 for c in rgb] + [1.0]
checker.pixels = pixels
checker.filepath_raw = os.path.join(root, "tex", "checker.png")
checker.file_format = "PNG"
checker.save()

# ── lib/prop.blend: one object, linked (not appended) by the scene ──────────────────────────────
bpy.ops.wm.read_factory_settings(use_empty=True)
bpy.ops.mesh.primitive_cube_add(size=1.0, location=(0, 0, 0.5))
prop = bpy.context.object
prop.name = "Prop"
prop.data.materials.append(emission_material("PropWhite", (0.8, 0.8, 0.8)))
bpy.ops.wm.save_as_mainfile(filepath=os.path.join(root, "lib", "prop.blend"), compress=True)

# ── textured.blend ──────────────────────────────────────────────────────────────────────────────
bpy.ops.wm.read_factory_settings(use_empty=True)
scene = bpy.context.scene
scene.frame_start, scene.frame_end, scene.frame_step = 11, 35, 1
scene.render.fps, scene.render.fps_base = 25, 1.0
scene.render.resolution_x, scene.render.resolution_y = 320, 240
scene.render.resolution_percentage = 100
scene.render.engine = "CYCLES"
scene.cycles.samples = 4
scene.cycles.use_denoising = False
scene.view_settings.view_transform = "Standard"
scene.render.image_settings.file_format = "PNG"
scene.render.image_settings.color_mode = "RGB"
scene.render.image_settings.color_depth = "8"

image = bpy.data.images.load(os.path.join(root, "tex", "checker.png"))
image.filepath = "//tex/checker.png"
bpy.ops.mesh.primitive_plane_add(size=8.0, location=(0, 0, 0))
bpy.context.object.name = "Floor"
bpy.context.object.data.materials.append(emission_material("Checker", image=image))

bpy.ops.object.camera_add(location=(0, 0, 10), rotation=(0, 0, 0))
camera = bpy.context.object
camera.name = "ShotCam"
camera.data.type = "ORTHO"
camera.data.ortho_scale = 6.0
scene.camera = camera
with bpy.data.libraries.load(os.path.join(root, "lib", "prop.blend"), link=True) as (src, dst):
    dst.objects = ["Prop"]
scene.collection.objects.link(dst.objects[0])

bpy.data.libraries[0].filepath = "//lib/prop.blend"
bpy.ops.wm.save_as_mainfile(filepath=out, compress=True, relative_remap=True)
for backup in (out + "1", os.path.join(root, "lib", "prop.blend1")):
    if os.path.exists(backup):
        os.remove(backup)
print(f"wrote {out}")
