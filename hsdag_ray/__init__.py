"""hsdag_ray: learned device placement of neural networks' computation graphs (HSDAG
and the methods it is compared with), measured on OpenVINO or PyTorch devices, on Ray."""
__version__ = "0.1.0"
