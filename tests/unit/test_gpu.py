from workers.gpu import Capabilities, best_device


def test_cycles_uses_optix_then_cuda_only_where_an_nvidia_gpu_is_listed() -> None:
    assert best_device(("CPU", "CUDA", "OPTIX"), ("NVIDIA L4",)) == "OPTIX"
    assert best_device(("CPU", "CUDA"), ("NVIDIA L4",)) == "CUDA"
    assert best_device(("CPU", "CUDA"), ()) == "CPU"


def test_a_worker_whose_blender_fails_takes_no_render_chunks() -> None:
    assert "render" not in Capabilities(blender_error="blender: not found").queues()
    assert "render" in Capabilities(blender_version="4.5.4").queues()


def test_heartbeat_fields_name_the_blender_and_what_it_can_do() -> None:
    caps = Capabilities(
        blender_version="4.5.4",
        blender_file_version=(4, 5, 91),
        engines=("BLENDER_EEVEE_NEXT", "BLENDER_WORKBENCH", "CYCLES"),
        devices=("CPU",),
        denoisers=("OPENIMAGEDENOISE",),
    ).to_json()
    assert caps["blender_version"] == "4.5.4"
    assert caps["blender_file_version"] == (4, 5, 91)
    assert caps["denoisers"] == ("OPENIMAGEDENOISE",)
