"""Builds the tiny scenes the render-script tests open (run with the bpy wheel, not imported):
    python -I tests/integration/render_scenes.py OUT_DIR
Each scene is 32x32, frames 1-2, one cube in front of a camera, 2 samples.
tests/integration/blends/{cycles,eevee}-5.0.blend are this script's scenes saved by Blender 5.0.1
(`pip install bpy==5.0.1` in a separate venv, run this script, then save with compress=True).
"""

import os
import sys

import bpy

OUT = sys.argv[1]

# Run on load when scripts are allowed: prints forged farm lines and writes a marker file.
ON_LOAD = """
import bpy, os
print("FARM-FRAME 0123456789abcdef0123456789abcdef {\\"frame\\": 1, \\"files\\": [\\"../../etc/passwd\\"], \\"preview\\": \\"x\\"}")
print("Saved: '/etc/passwd'")
open(os.path.join(os.path.dirname(bpy.data.filepath), "autoexec-ran"), "w").write("ran")
"""


def base(engine="CYCLES"):
    bpy.ops.wm.read_factory_settings(use_empty=True)
    scene = bpy.context.scene
    scene.render.engine = engine
    scene.render.resolution_x = scene.render.resolution_y = 32
    scene.render.resolution_percentage = 100
    scene.frame_start, scene.frame_end = 1, 2
    if engine == "CYCLES":
        scene.cycles.samples = 2
        scene.cycles.use_denoising = False
        scene.cycles.device = "CPU"
    elif engine.startswith("BLENDER_EEVEE"):
        scene.eevee.taa_render_samples = 1
    world = bpy.data.worlds.new("World")
    scene.world = world
    world.color = (0.2, 0.3, 0.5)
    bpy.ops.mesh.primitive_cube_add(size=1.0, location=(0, 0, 0))
    cube = bpy.context.object
    mat = bpy.data.materials.new("Red")
    mat.use_nodes = True
    mat.node_tree.nodes["Principled BSDF"].inputs["Base Color"].default_value = (0.9, 0.1, 0.1, 1)
    cube.data.materials.append(mat)
    bpy.ops.object.camera_add(location=(0, -4, 0), rotation=(1.5708, 0, 0))
    scene.camera = bpy.context.object
    bpy.ops.object.light_add(type="SUN", location=(0, -3, 3))
    return scene


def save(name):
    bpy.ops.wm.save_as_mainfile(filepath=os.path.join(OUT, name), compress=False)


base()
save("cycles.blend")

scene = base()
scene.cycles.use_denoising = True
scene.cycles.denoiser = "OPENIMAGEDENOISE"
save("denoise.blend")

scene = base()
if hasattr(scene.render.image_settings, "media_type"):  # Blender 5.0
    scene.render.image_settings.media_type = "MULTI_LAYER_IMAGE"  # OpenEXR multilayer
else:
    scene.render.image_settings.file_format = "OPEN_EXR_MULTILAYER"
scene.render.image_settings.color_depth = "32"
scene.view_layers[0].use_pass_normal = True
scene.view_layers[0].use_pass_z = True
scene.view_settings.view_transform = "AgX"
save("exr.blend")

scene = base()
scene.render.image_settings.file_format = "PNG"
scene.render.image_settings.color_mode = "RGBA"
scene.render.image_settings.color_depth = "16"
scene.render.film_transparent = True
save("png16.blend")

# The film opaque, but a holdout cube: alpha 0 where the cube is.
base()
bpy.data.objects["Cube"].is_holdout = True
save("holdout.blend")

# Eevee is BLENDER_EEVEE_NEXT in 4.2-4.5 and BLENDER_EEVEE again in 5.0.
base("BLENDER_EEVEE_NEXT" if bpy.app.version[:2] < (5, 0) else "BLENDER_EEVEE")
save("eevee.blend")

base("BLENDER_WORKBENCH")
save("workbench.blend")

base()
bpy.data.objects["Cube"].name = "Saved: '/etc/passwd'"
# A Python driver: evaluated only when scripts may run; it writes a marker beside the scene.
curve = bpy.data.objects["Saved: '/etc/passwd'"].driver_add("location", 0)
curve.driver.type = "SCRIPTED"
curve.driver.expression = (
    "__import__('pathlib').Path(__import__('bpy').data.filepath)"
    ".with_name('driver-ran').write_text('ran') * 0"
)
text = bpy.data.texts.new("on_load.py")
text.write(ON_LOAD)
text.use_module = True
save("hostile.blend")

scene = base()
image = bpy.data.images.new("gone", 4, 4)
image.source = "FILE"
image.filepath = "//tex/gone.png"
mat = bpy.data.materials["Red"]
node = mat.node_tree.nodes.new("ShaderNodeTexImage")
node.image = image
mat.node_tree.links.new(
    node.outputs["Color"], mat.node_tree.nodes["Principled BSDF"].inputs["Base Color"]
)
save("missing.blend")

# A linked library that is gone by render time: the prop it held would silently be absent.
base()
lib_dir = os.path.join(OUT, "lib_gone")
os.makedirs(lib_dir, exist_ok=True)
bpy.ops.wm.save_as_mainfile(filepath=os.path.join(lib_dir, "prop.blend"), compress=False)
base()
with bpy.data.libraries.load(os.path.join(lib_dir, "prop.blend"), link=True, relative=True) as (
    src,
    dst,
):
    dst.objects = ["Cube"]
for obj in dst.objects:
    bpy.context.scene.collection.objects.link(obj)
save("libmissing.blend")
os.remove(os.path.join(lib_dir, "prop.blend"))
os.rmdir(lib_dir)

if bpy.app.version[:2] >= (5, 0):
    sys.exit(0)  # 5.0's compositor node API differs; the File Output test uses 4.5 scenes
scene = base()
scene.use_nodes = True
tree = scene.node_tree
out = tree.nodes.new("CompositorNodeOutputFile")
out.base_path = os.path.join(OUT, "outside")
out.file_slots[0].path = "../../escape_"
tree.links.new(tree.nodes["Render Layers"].outputs["Image"], out.inputs[0])
save("fileoutput.blend")
