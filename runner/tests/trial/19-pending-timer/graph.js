export const meta = {name: 'pending-timer', slug: 'pending-timer', version: '1'};
export default async function (args, g) {
  setTimeout(() => g.log("late"), 5000);
  return "done";
}
