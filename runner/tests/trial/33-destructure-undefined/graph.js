export const meta = {name: 'destructure-undefined', slug: 'destructure-undefined', version: '1'};
export default async function (args, g) {
  const {model, depth} = args.config;
  return model + depth;
}
