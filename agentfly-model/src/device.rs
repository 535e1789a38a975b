//! Choosing the Burn device from a name: `cpu` (Burn's `flex` backend, the default),
//! `wgpu` (any GPU through WebGPU/Vulkan/Metal; needs the `wgpu` feature) or `cuda[:N]`
//! (needs the `cuda` feature). `ndarray` (Burn's older CPU backend, feature `ndarray`) and
//! `tch` (libtorch on the CPU, feature `tch`; see BENCHMARKS.md for building it) are there
//! to measure against flex.

use burn::tensor::Device;

/// `device` with autodiff for training. With `checkpointing`, Burn's balanced gradient
/// checkpointing recomputes the cheap, memory-bound operations (norms, rotary embeddings,
/// softmax, activations) in the backward pass from the matrix products' outputs instead of
/// keeping their results: a 4 × 512 SmolLM2 step peaks at 7.0 GB instead of 9.4 GB for
/// about 5% more time (BENCHMARKS.md). Every tensor of one update must come from the same
/// kind of training device.
pub fn training(device: Device, checkpointing: bool) -> Device {
    if checkpointing {
        device.autodiff().gradient_checkpointing()
    } else {
        device.autodiff()
    }
}

/// Parses `cpu`, `wgpu` or `cuda[:N]` into a device; the error says which feature is
/// missing or what is accepted.
pub fn parse_device(name: &str) -> Result<Device, String> {
    let name = name.trim().to_ascii_lowercase();
    match name.as_str() {
        "cpu" | "flex" => Ok(Device::flex()),
        "wgpu" | "gpu" => wgpu(),
        "ndarray" => ndarray(),
        "tch" | "libtorch" => tch(),
        _ if name == "cuda" || name.starts_with("cuda:") => {
            let index = match name.strip_prefix("cuda:") {
                Some(i) => i.parse::<usize>().map_err(|_| {
                    format!("`{name}`: the CUDA index must be a number, e.g. cuda:0")
                })?,
                None => 0,
            };
            cuda(index)
        }
        _ => Err(format!(
            "unknown device `{name}`; use cpu, wgpu or cuda[:N]"
        )),
    }
}

#[cfg(feature = "wgpu")]
fn wgpu() -> Result<Device, String> {
    Ok(Device::wgpu(burn::tensor::DeviceKind::DefaultDevice))
}

#[cfg(not(feature = "wgpu"))]
fn wgpu() -> Result<Device, String> {
    Err("this binary was built without the `wgpu` feature (cargo build --features wgpu)".into())
}

#[cfg(feature = "ndarray")]
#[allow(deprecated)]
fn ndarray() -> Result<Device, String> {
    Ok(Device::ndarray())
}

#[cfg(not(feature = "ndarray"))]
fn ndarray() -> Result<Device, String> {
    Err(
        "this binary was built without the `ndarray` feature (cargo build --features ndarray)"
            .into(),
    )
}

#[cfg(feature = "tch")]
#[allow(deprecated)]
fn tch() -> Result<Device, String> {
    Ok(Device::libtorch())
}

#[cfg(not(feature = "tch"))]
fn tch() -> Result<Device, String> {
    Err("this binary was built without the `tch` feature (cargo build --features tch)".into())
}

#[cfg(feature = "cuda")]
fn cuda(index: usize) -> Result<Device, String> {
    let device = Device::cuda(index);
    // Burn's CUDA runtime panics on a thread of its own when it cannot load the driver
    // (libcuda) or find the device: try it once here, so that such a machine gets an
    // error rather than a panic in the middle of a run.
    let probe = device.clone();
    std::thread::spawn(move || {
        let _ = burn::tensor::Tensor::<1>::zeros([1], &probe).into_data();
    })
    .join()
    .map_err(|panic| {
        format!(
            "cuda:{index}: Burn's CUDA runtime could not start ({}; the reason is printed \
             above): is the NVIDIA driver (libcuda) installed and on LD_LIBRARY_PATH, and is \
             there a device {index}?",
            agentfly_core::tool::panic_message(panic.as_ref())
        )
    })?;
    Ok(device)
}

#[cfg(not(feature = "cuda"))]
fn cuda(_index: usize) -> Result<Device, String> {
    Err("this binary was built without the `cuda` feature (cargo build --features cuda)".into())
}
