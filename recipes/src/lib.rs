//! Warden recipes: locks with fencing tokens, leader election and more. (Recipes land with issue 5.)
