use mlx_rs::{ops, Array};

#[test]
fn mlx_matmul_evaluates_from_rust() -> Result<(), mlx_rs::error::Exception> {
    let a = Array::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2]);
    let b = Array::from_slice(&[1.0f32, 0.0, 0.0, 1.0], &[2, 2]);
    let c = ops::matmul(&a, &b)?;
    c.eval()?;
    assert_eq!(c.as_slice::<f32>(), &[1.0, 2.0, 3.0, 4.0]);
    Ok(())
}

#[test]
fn group_of_one_without_configuration() -> Result<(), super::GroupError> {
    let group = super::Group::init(super::Transport::Any, false)?;
    assert_eq!((group.rank(), group.size()), (0, 1));
    Ok(())
}
